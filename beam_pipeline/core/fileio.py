"""The one way this project touches files: local paths and ``gs://`` alike.

Every read, write, listing and rename of an artifact, a staged module or a run record goes
through these functions, which delegate to ``tf.io.gfile`` for ``gs://`` paths. Local
paths go to Python's own functions (reads and writes, listings, globs, walks, folder
creation, sizes, overwriting renames and removals), with gfile's meaning, so that the data
stages' workers and the ``runs`` commands never import TensorFlow; only a local ``rmtree``
or non-overwriting ``rename`` still uses gfile. Why
``tf.io.gfile`` and not Beam's ``FileSystems``: :mod:`trainer` runs inside a worker and in
plain processes where it must not need Beam (see DESIGN.md), while TensorFlow is present
in every process that touches an artifact; gfile also has folders (``makedirs``,
``walk``, ``rmtree``, a folder ``rename``), which the atomic publishing of
:mod:`beam_pipeline.engine.run_dir` needs and
Beam's flat object-store view does not give. TFX's ``tfx.dsl.io.fileio`` made the same
choice. Beam's IOs (``ReadFromText``, ``WriteToTFRecord``, ...) still read and write the
data inside Beam jobs; this module is for everything around them.

TensorFlow is imported on first use, not at import time: the CLI checks its flags in
well under a second and only then pays for TensorFlow.

Example::

    from beam_pipeline.core import fileio

    fileio.makedirs(fileio.join(root, "schema"))
    with fileio.open(fileio.join(root, "schema", "schema.pbtxt"), "w") as f:
        f.write(text)
    fileio.write_atomic(fileio.join(root, "summary.json"), json.dumps(summary))
"""

from __future__ import annotations

import builtins
import errno
import os
import posixpath
import sys
from collections.abc import Iterator
from typing import IO, Any

__all__ = [
    "copy",
    "exists",
    "glob",
    "is_remote",
    "isdir",
    "join",
    "listdir",
    "makedirs",
    "open",
    "read_file",
    "remove",
    "rename",
    "rmtree",
    "size",
    "walk",
    "write_atomic",
    "write_file",
]


def _gfile() -> Any:
    import tensorflow as tf

    return tf.io.gfile


def is_remote(path: str) -> bool:
    """Whether ``path`` is a URL (``gs://...``) rather than a local path."""
    return "://" in path


def join(*parts: str) -> str:
    """Joins path parts: with ``/`` for URLs (``gs://...``), as the OS does for local paths."""
    return posixpath.join(*parts) if is_remote(parts[0]) else os.path.join(*parts)


def exists(path: str) -> bool:
    """Whether a file or folder exists at ``path``."""
    if not is_remote(path):
        # The OS for local paths: `runs list` and the CLI's checks of the pipeline root need
        # no TensorFlow (seconds of import, and its C++ lines on stderr, for nothing).
        return os.path.exists(path)
    return _gfile().exists(path)


def isdir(path: str) -> bool:
    """Whether ``path`` is a folder."""
    if not is_remote(path):
        return os.path.isdir(path)  # as exists()
    return _gfile().isdir(path)


def makedirs(path: str) -> None:
    """Creates ``path`` and its missing parents (no error if it exists)."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=True)  # no TensorFlow import in a data worker (see open)
        return
    _gfile().makedirs(path)


def listdir(path: str) -> list[str]:
    """The names (not paths) of the entries of folder ``path``."""
    if not is_remote(path):
        return os.listdir(path)  # as exists(): `runs diff` and the report list folders
    return _gfile().listdir(path)


def glob(pattern: str) -> list[str]:
    """The paths matching ``pattern`` (``*``, ``?``, ``[...]``), sorted."""
    if not is_remote(pattern) and sys.version_info >= (3, 11):
        # As gfile matches, a wildcard matches names that start with a dot too (Python's
        # glob skips them unless told; `include_hidden` is new in Python 3.11).
        import glob  # lazily: `--help` imports this module, not this

        return sorted(glob.glob(pattern, include_hidden=True))
    return sorted(_gfile().glob(pattern))


def walk(top: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk`` for local and remote folders: ``(folder, subfolders, files)``."""
    if not is_remote(top):
        return os.walk(top)
    return _gfile().walk(top)


def size(path: str) -> int:
    """The size of file ``path`` in bytes."""
    if not is_remote(path):
        return os.path.getsize(path)  # no TensorFlow import in a data worker (see open)
    return _gfile().stat(path).length


def open(path: str, mode: str = "r") -> IO[Any]:  # noqa: A001 - the module's file API
    """Opens file ``path`` (``"r"``, ``"rb"``, ``"w"``, ``"wb"``, ``"a"``)."""
    if not is_remote(path):
        # Local files need no gfile: the data stages' workers read their input and write
        # statistics this way, and importing TensorFlow for it would cost each of them
        # seconds of CPU and hundreds of MB that nothing else in ExampleGen or Statistics
        # uses; `runs diff` and `runs report` read run records as text (TensorFlow's
        # import would take longer than the command itself). Text as gfile has it:
        # UTF-8, and line ends neither translated on reading nor on writing.
        if "b" in mode:
            return builtins.open(path, mode)
        return builtins.open(path, mode, encoding="utf-8", newline="")
    return _gfile().GFile(path, mode)


def rename(src: str, dst: str, overwrite: bool = False) -> None:
    """Moves ``src`` (a file or, on local disks, a folder) to ``dst``."""
    if not (is_remote(src) or is_remote(dst)):
        # What gfile does on a local disk, without its import: a data-only run publishes
        # its outputs this way and needs TensorFlow for nothing else.
        if overwrite:
            os.replace(src, dst)
            return
        if os.path.exists(dst):  # gfile's check, then the rename
            raise FileExistsError(errno.EEXIST, "file exists and overwrite is off", dst)
        os.rename(src, dst)
        return
    _gfile().rename(src, dst, overwrite=overwrite)


def copy(src: str, dst: str, overwrite: bool = False) -> None:
    """Copies file ``src`` to ``dst``; an existing ``dst`` is an error unless ``overwrite``."""
    if not (is_remote(src) or is_remote(dst)):
        # gfile's meaning (refuse an existing file unless told), without its import: the
        # Pusher's and publishing's copies are local more often than not.
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(errno.EEXIST, "file exists and overwrite is off", dst)
        import shutil

        shutil.copyfile(src, dst)
        return
    _gfile().copy(src, dst, overwrite=overwrite)


def remove(path: str) -> None:
    """Deletes file ``path``."""
    if not is_remote(path):
        os.remove(path)
        return
    _gfile().remove(path)


def rmtree(path: str) -> None:
    """Deletes folder ``path`` and everything in it."""
    if not is_remote(path):
        import shutil  # lazily, as in copy

        shutil.rmtree(path)  # no TensorFlow import for a local folder (see rename)
        return
    _gfile().rmtree(path)


def write_atomic(path: str, data: str | bytes) -> None:
    """Writes ``data`` to ``path`` so readers see the old file or the whole new one.

    The data goes to a uniquely named sibling first and is renamed over ``path``: a rename
    is atomic on local disks, and on object stores the object appears only once written,
    so a reader never sees a half-written file and two writers never mix their bytes.
    """
    import uuid

    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    mode = "wb" if isinstance(data, bytes) else "w"
    try:
        with open(tmp, mode) as f:
            f.write(data)
        rename(tmp, path, overwrite=True)
    except BaseException:
        # A write that failed (a full disk) leaves no partial sibling behind either.
        try:
            if exists(tmp):
                remove(tmp)
        except OSError:
            pass
        raise


def read_file(path: str, binary: bool = False) -> str | bytes:
    """The whole content of file ``path``: bytes when ``binary``, else text."""
    with open(path, "rb" if binary else "r") as f:
        return f.read()


def write_file(path: str, data: str | bytes) -> None:
    """Writes ``data`` (text or bytes) to file ``path``, creating its folder when missing."""
    folder = os.path.dirname(path)
    if folder:
        makedirs(folder)
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def absolute_uri(uri: str) -> str:
    """A uri as the metadata store keeps it: a local path made absolute (a relative
    ``--pipeline_root`` is relative to the launch's working folder, not the store's)."""
    return uri if is_remote(uri) else os.path.abspath(uri)
