"""Errors the user can act on.

Every error raised for bad input is a :class:`PipelineError` whose message is one
sentence naming the input, the place and the fix. The CLI prints the message (no
traceback) and exits with :data:`EXIT_USER_ERROR`.

Example::

    raise PipelineError(
        f"--data {path!r} matches no file; pass an existing CSV/TFRecord file, folder or glob.")
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from typing import Optional

__all__ = [
    "PipelineError",
    "EXIT_USER_ERROR",
    "EXIT_ANOMALIES",
    "filesystem_error",
    "user_error",
]

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


# Filesystem errors the user fixes (room, permissions), not bugs: they end the run with one
# sentence instead of a traceback.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
_CAUSES = {os.strerror(n): n for n in _NO_ROOM + _NOT_WRITABLE}
# The same errors as text: Beam's runners re-raise a worker's error as a RuntimeError or a
# message ("OSError: [Errno 28] No space left on device: '/x' [while running ...]"), and
# TensorFlow's file API writes them as "/path; Permission denied".
_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\] [^:\[\]\n]+(?:: '([^'\n]+)')?")
_TF_TEXT = re.compile(r"([^\s;'\"]+); (" + "|".join(re.escape(c) for c in _CAUSES) + ")")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [e.__cause__, e.__context__]


def filesystem_error(exc: BaseException, pipeline_root: str) -> Optional[PipelineError]:
    """The one-sentence error for a full disk or a path that cannot be written, if ``exc``
    (or what caused it) is one; None otherwise.

    Args:
      exc: an error raised on the launcher, or by a Beam job on a worker.
      pipeline_root: where the run writes; named when the error does not name a path (a
        write that fails for lack of room names no file).
    """
    found: Optional[tuple[int, Optional[str]]] = None
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _NO_ROOM + _NOT_WRITABLE:
            found = (e.errno, e.filename if isinstance(e.filename, str) else None)
            break
    if found is None:
        for e in _chain(exc):
            text = str(e)
            m = _ERRNO_TEXT.search(text)
            if m and int(m.group(1)) in _NO_ROOM + _NOT_WRITABLE:
                found = (int(m.group(1)), m.group(2))
                break
            m = _TF_TEXT.search(text)
            if m:
                found = (_CAUSES[m.group(2)], m.group(1))
                break
    if found is None:
        return None
    code, path = found
    cause = os.strerror(code)
    room = code in _NO_ROOM
    if not path:
        fix = "free space there" if room else "make it writable"
        return PipelineError(
            f"Writing the run under --pipeline_root {pipeline_root} failed ({cause}); {fix} or "
            "pass another --pipeline_root."
        )
    if not _is_under(path, pipeline_root):
        fix = "free space on that disk" if room else "check that path's permissions"
        return PipelineError(f"Cannot use {path} ({cause}); {fix}.")
    fix = "free space there" if room else "make it writable"
    return PipelineError(f"Cannot write {path} ({cause}); {fix} or pass another --pipeline_root.")


def user_error(exc: BaseException, pipeline_root: str) -> Optional[PipelineError]:
    """The :class:`PipelineError` that ``exc`` is or wraps (a Beam runner wraps a worker's
    error), or its :func:`filesystem_error`; None for any other error (a bug)."""
    for e in _chain(exc):
        if isinstance(e, PipelineError):
            return e
    return filesystem_error(exc, pipeline_root)


def _is_under(path: str, root: str) -> bool:
    if "://" in path or "://" in root:
        return path.startswith(root.rstrip("/"))
    root = os.path.abspath(root)
    return os.path.commonpath([os.path.abspath(path), root]) == root
