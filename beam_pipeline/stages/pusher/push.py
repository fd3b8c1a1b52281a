"""The Pusher stage: a blessed model copied to ``<destination>/<version>/``.

The layout TF Serving and Vertex AI load: one folder per integer version under the
model's base path, the highest served. The version is one more than the highest integer
folder already there (1 for an empty destination), so versions increase whatever the
clock says. The copy is atomic for readers: the files go into a hidden
``.<version>.partial-<id>`` folder (TF Serving ignores names that are not integers),
which is renamed to ``<version>`` when complete (another push that took that version
meanwhile makes it take the next: :func:`_claim_version`); on object stores (no folder
rename) the files are copied under ``<version>/``, the graph (``saved_model.pb``) after
the variables, so that a server that sees the version early fails to load it and retries
rather than loading half of it, and ``_PUBLISHED`` is written last, as the run directory
publishes its artifacts.

Example::

    pushed = push_model("run/model", "/srv/models/penguin")   # "/srv/models/penguin/3"
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import uuid

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, first_line
from beam_pipeline.core.types import PUBLISHED_MARKER

__all__ = ["next_version", "push_model"]

_CLAIM_ATTEMPTS = 100  # versions tried in a row; each is lost only to a push that finished


def next_version(destination: str) -> int:
    """One more than the highest integer folder in ``destination`` (1 when there is none)."""
    if not fileio.exists(destination):
        return 1
    versions = [int(n.rstrip("/")) for n in fileio.listdir(destination) if n.rstrip("/").isdigit()]
    return max(versions, default=0) + 1


def _files(top: str) -> list[str]:
    return [fileio.join(d, f) for d, _, files in fileio.walk(top) for f in files]


# What makes a folder a loadable SavedModel: TF Serving retries a version whose load
# failed, so on an object store (files appear one by one) these go last.
_GRAPH_FILES = ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb")


def _graph_last(files: list[str]) -> list[str]:
    """``files`` with the SavedModel's graph files after its variables and assets."""
    return sorted(files, key=lambda f: posixpath.basename(f) in _GRAPH_FILES)


def _claim_version(partial: str, destination: str, version: int) -> str:
    """Renames the complete ``partial`` folder to the first free version from ``version``.

    Another run pushing to the same destination at the same time may have taken that
    version since it was counted. ``os.rename`` of a folder onto an existing non-empty
    folder fails (POSIX), and a version folder is never empty (it arrives whole by its own
    rename), so the rename itself is the atomic claim: the loser counts again and renames
    to the next number. Not ``fileio.rename``: gfile checks the target and then renames,
    two steps another push can fall between.
    """
    for _ in range(_CLAIM_ATTEMPTS):
        final = os.path.join(destination, str(version))
        try:
            os.rename(partial, final)
            return final
        except OSError:
            if not os.path.isdir(final):
                raise  # not a version taken meanwhile: a real error, reported as such
        version = max(version + 1, next_version(destination))
    shutil.rmtree(partial, ignore_errors=True)
    raise PipelineError(
        f"--push_destination {destination}: {_CLAIM_ATTEMPTS} versions in a row were taken "
        "by other pushes while this one was renaming its copy; push fewer runs at once "
        "to it, or rerun with the same --run_id: only the Pusher runs again."
    )


def _no_room(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a full disk or quota."""
    while error is not None:
        if getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
            return True
        if os.strerror(errno.ENOSPC) in str(error):  # TensorFlow's file errors: as text
            return True
        error = error.__cause__ or error.__context__
    return False


def push_model(model_dir: str, destination: str) -> str:
    """Copies ``model_dir`` to ``destination/<next version>/`` and returns that folder.

    Raises:
      PipelineError: the destination cannot be created or written (the model stays in
        the run directory, blessed; rerunning with the same --run_id pushes it).
    """
    try:
        fileio.makedirs(destination)
        version = next_version(destination)
        final = fileio.join(destination, str(version))
        files = [f for f in _files(model_dir) if posixpath.basename(f) != PUBLISHED_MARKER]
        if fileio.is_remote(destination):
            for src in _graph_last(files):
                dst = fileio.join(final, posixpath.relpath(src, model_dir))
                fileio.copy(src, dst, overwrite=True)
            fileio.write_file(fileio.join(final, PUBLISHED_MARKER), "")
            return final
        partial = fileio.join(destination, f".{version}.partial-{uuid.uuid4().hex[:8]}")
        try:
            for src in files:
                dst = fileio.join(partial, posixpath.relpath(src, model_dir))
                fileio.makedirs(posixpath.dirname(dst))
                fileio.copy(src, dst)
            return _claim_version(partial, destination, version)
        except BaseException:
            # A copy that failed half-way (a full disk) is never left: it is not a version.
            shutil.rmtree(partial, ignore_errors=True)
            raise
    except Exception as e:  # noqa: BLE001  tf.errors.OpError is not an OSError
        if isinstance(e, PipelineError):
            raise
        if _no_room(e):
            raise PipelineError(
                f"--push_destination {destination} is full ({first_line(e)}); free space there "
                "or pick another destination and rerun with the same --run_id: the model "
                "stays blessed and only the Pusher runs again."
            ) from None
        raise PipelineError(
            f"--push_destination {destination} is not writable ({type(e).__name__}: "
            f"{first_line(e)}); fix its permissions or pick another destination and rerun with "
            "the same --run_id: the model stays blessed and only the Pusher runs again."
        ) from None
