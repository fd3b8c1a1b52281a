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
    "code_error",
    "filesystem_error",
    "first_line",
    "transform_error",
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


def no_room(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a full disk or quota, also as the text of a
    wrapped error (TensorFlow's, SQLite's "database or disk is full")."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _NO_ROOM:
            return True
        text = str(e)
        if any(os.strerror(n) in text for n in _NO_ROOM) or "database or disk is full" in text:
            return True
    return False


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
    error), its :func:`filesystem_error`, or its :func:`code_error`; None for any other
    error (a bug)."""
    for e in _chain(exc):
        if isinstance(e, PipelineError):
            # Beam's in-process runner appends the step to the message it re-raises.
            text = _STEP.sub("", str(e)).strip()
            return e if text == str(e) else PipelineError(text, e.exit_code)
    for e in _chain(exc):
        # A worker process's PipelineError arrives as its traceback's text (the
        # multi_processing and portable runners): its last line is the sentence.
        found = _WORKER_PIPELINE_ERROR.findall(str(e))
        if found:
            return PipelineError(_STEP.sub("", found[-1]).strip())
    return filesystem_error(exc, pipeline_root) or code_error(exc)


# How Beam's runners carry a worker's error: the exception itself (in_memory: augmented
# with the step, "bad value [while running 'Map(step)']"), or its traceback as the text of
# a RuntimeError (multi_processing, portable, the tuner's pool), whose frames read
# 'File "/path/module.py", line 3, in step'.
_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in ')
_STEP = re.compile(r" ?\[while running '([^']*)'\]")
_WORKER_PIPELINE_ERROR = re.compile(
    r"^(?:beam_pipeline\.core\.errors\.)?PipelineError: (.+)$", re.M
)
# beam_pipeline/core/errors.py -> the folder holding the three packages.
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PACKAGE_DIRS = tuple(
    os.path.join(_REPO_ROOT, name) + os.sep for name in ("beam_pipeline", "trainer", "transforms")
)


def _is_user_file(path: str) -> bool:
    """A file of the user's code: not this project's packages, not installed, not Python's."""
    if path.startswith("<") or not os.path.isabs(path):  # <string>; Beam's Cython frames
        return False
    parts = set(path.split(os.sep))
    if parts & {"site-packages", "dist-packages"}:
        return False
    import sysconfig  # lazily: `--help` imports this module, not this

    stdlib = {sysconfig.get_paths()["stdlib"], os.path.dirname(os.__file__)}
    if any(path.startswith(s.rstrip(os.sep) + os.sep) for s in stdlib):
        return False
    return not path.startswith(_PACKAGE_DIRS)


def _last_user_error(text: str) -> Optional[tuple[str, str, int]]:
    """(exception line, file, line) of the last traceback in ``text`` that passes through
    the user's code: the exception it ends with and its last frame in a user file.

    The last one: a runner's error text holds the launcher's traceback first, then the
    worker's, whose innermost user frame is where the error was raised.
    """
    for chunk in reversed(text.split(_TRACEBACK)[1:]):
        place: Optional[tuple[str, int]] = None
        lines = chunk.splitlines()
        for i, line in enumerate(lines):
            m = _FRAME.match(line)
            if m:
                if _is_user_file(m.group(1)):
                    place = (m.group(1), int(m.group(2)))
                continue
            if place and line and not line[0].isspace():
                # The exception line: it may go on over several lines (a message with
                # newlines); its first line says what happened.
                return _STEP.sub("", line).strip(), place[0], place[1]
            if line and not line[0].isspace() and i:
                break  # this traceback ended outside the user's code
    return None


# tf.Transform's message when an op of preprocessing_fn fails on a batch (tensorflow_transform
# 1.21, beam/impl.py): the TensorFlow error comes inside the quotes; graphs loaded from a
# SavedModel have no creation traceback ("<stack traces unavailable>").
_TFT_APPLY = 'An error occurred while trying to apply the transformation: "'
_TF_NOISE = re.compile(
    r"^(Graph execution error:|Detected at node .*|<stack traces unavailable>|\s*\[\[\{\{node .*)$"
)
_MAX_MESSAGE = 300


def transform_error(
    exc: BaseException, module_file: str = "the module file"
) -> Optional[PipelineError]:
    """The one-sentence error for a preprocessing_fn op that failed on the data in the
    Transform job (a ``tf.debugging.assert_*``, a bad cast...), if ``exc`` is one; else None.

    TensorFlow names the op and its message but not the line of the module file that made
    the op, so the sentence names the module file, the exception and its message.
    """
    import traceback  # lazily: `--help` imports this module, not this

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    start = text.find(_TFT_APPLY)
    if start < 0:
        return None
    inner = text[start + len(_TFT_APPLY) :]
    lines = [
        line.strip() for line in inner.splitlines() if line.strip() and not _TF_NOISE.match(line)
    ]
    message = lines[0] if lines else "(no message)"
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 3] + "..."
    kind = re.search(r"\b(\w+Error): Graph execution error", text)
    what = kind.group(1) if kind else "TensorFlow error"
    return PipelineError(
        f"preprocessing_fn of {module_file} failed on the data in the Transform job with "
        f"{what}: {message}; fix preprocessing_fn or the input data."
    )


def code_error(exc: BaseException) -> Optional[PipelineError]:
    """The one-sentence error for an exception the user's code raised in a Beam step, on
    any runner, if ``exc`` (or the worker error a runner wrapped in it) is one; else None.

    The sentence names the exception's type and message, the user's file and line (the
    module file, or a helper module it imports) and the Beam step, e.g. "ValueError: bad
    value 3, raised at my_module.py:12 in step 'Transform/...'; fix the code there (or the
    input it was given)". An error raised in this project's or a library's code alone
    (a bug, not the user's) gives None.
    """
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    found = _last_user_error(text)
    if found is None:
        return transform_error(exc)
    what, path, line = found
    step = _STEP.search(text)
    in_step = f" in step {step.group(1)!r}" if step else ""
    return PipelineError(
        f"{what}, raised at {path}:{line}{in_step}; fix the code there (or the input it was given)."
    )


def _is_under(path: str, root: str) -> bool:
    if "://" in path or "://" in root:
        return path.startswith(root.rstrip("/"))
    root = os.path.abspath(root)
    return os.path.commonpath([os.path.abspath(path), root]) == root


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message ("" when empty): what a one-sentence error quotes."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
