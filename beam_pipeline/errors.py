"""Errors the user can act on.

Every error raised for bad input is a :class:`PipelineError` whose message is one
sentence naming the input, the place and the fix. The CLI prints the message (no
traceback) and exits with :data:`EXIT_USER_ERROR`.

Example::

    raise PipelineError(
        f"--data {path!r} matches no file; pass an existing CSV/TFRecord file, folder or glob.")
"""

from __future__ import annotations

__all__ = ["PipelineError", "EXIT_USER_ERROR", "EXIT_ANOMALIES"]

EXIT_USER_ERROR = 2
EXIT_ANOMALIES = 3


class PipelineError(Exception):
    """An error caused by the user's input, data or module file.

    Attributes:
      exit_code: the process exit code the CLI uses for it.
    """

    def __init__(self, message: str, exit_code: int = EXIT_USER_ERROR):
        super().__init__(message)
        self.exit_code = exit_code
