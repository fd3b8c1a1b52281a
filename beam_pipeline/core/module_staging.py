"""Module staging: the user's module file and its folder, copied beside the run's artifacts.

A run on remote workers (Dataflow, Flink, Spark) cannot load the module file from the
launching machine's disk. :func:`stage_module_file` copies it beside the run's artifacts, as
``<run_dir>/module/<sha256>/<file name>``, and the Python files of its folder (the helper
modules it may import, as TFX's wheel of the module's folder) as one zip archive,
``<run_dir>/module/<sha256 of the archive>/module_folder.zip``; workers load them with
:func:`fetch_staged_module` and :func:`fetch_module_folder`, which refuse any copy whose
sha256 is not the one the run fingerprinted, so every worker runs exactly the code the
launcher checked. The launcher side and the worker side live together because they are one
contract (the layout and the fingerprints).

Example::

    staged = stage_module_file(config.module_file, run_dir.root)     # launcher
    local_path = fetch_staged_module(staged.path, staged.sha256)     # worker
    folder = fetch_module_folder(staged.folder_archive, staged.folder_sha256)
    # (trainer.load_trainer_module(..., staged=staged) does both and adds the folder to
    # sys.path, so the module's helper modules import)

TensorFlow is imported on first file access (through :mod:`beam_pipeline.core.fileio`)
and Beam not at all: :mod:`trainer` calls the worker side and must stay importable
without Beam.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import posixpath
import shutil
import stat
import tempfile
import uuid
import zipfile
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.user_module import is_installed_code

__all__ = [
    "DEFAULT_MAX_MODULE_FOLDER_MIB",
    "MODULE_DIR",
    "MODULE_FOLDER_ARCHIVE",
    "ModuleBundle",
    "StagedModule",
    "bundle_module_file",
    "fetch_module_folder",
    "fetch_staged_module",
    "read_staged_module",
    "stage_module_file",
]

_LOG = logging.getLogger(__name__)

# Folder of the run directory that holds the staged module files, one per sha256.
MODULE_DIR = "module"
# File name of the staged archive of the module file's folder (in its own sha256 folder).
MODULE_FOLDER_ARCHIVE = "module_folder.zip"
# Default of --max_module_folder_mib: the Python files of a module's folder are small; a
# folder above this is most likely a whole project (or a home folder) by mistake.
DEFAULT_MAX_MODULE_FOLDER_MIB = 20.0
# Not staged from the module's folder: caches and hidden folders (.git, .venv, ...).
_SKIPPED_NAMES = ("__pycache__",)
# Not staged either: TensorFlow's autograph writes each converted function's source as a
# temporary ``__autograph_generated_file*.py`` (hundreds of them in a shared /tmp).
_TEMP_PREFIXES = ("__autograph_generated_file",)


@dataclasses.dataclass(frozen=True)
class StagedModule:
    """A module file and its folder's Python files copied into the run directory.

    Attributes:
      path: the staged module file, ``<run_dir>/module/<sha256>/<file name>``.
      sha256: hex sha256 of its bytes; workers refuse a copy that does not match.
      source: the module file as the user named it (for messages and tracebacks).
      folder_archive: the zip of the module's folder (its ``.py`` files and packages,
        the module file included), ``<run_dir>/module/<folder_sha256>/module_folder.zip``;
        empty when not staged.
      folder_sha256: hex sha256 of the archive's bytes.
    """

    path: str
    sha256: str
    source: str
    folder_archive: str = ""
    folder_sha256: str = ""


def _read_bytes(path: str, flag: str) -> bytes:
    if not fileio.exists(path):
        raise PipelineError(
            f"{flag} {path} does not exist; pass an existing Python file with --module_file."
        )
    with fileio.open(path, "rb") as f:
        return f.read()


def _folder_python_files(folder: str, module_name: str, limit: int) -> dict[str, str]:
    """``{path in the archive: file}`` of what is staged from a module file's folder.

    As TFX's wheel of the module's folder (``py_modules`` of its ``.py`` files, plus its
    packages): the folder's ``.py`` files and every package below it (a folder with an
    ``__init__.py``, recursively), without ``__pycache__`` or hidden entries. Data files
    are not staged. Walking stops as soon as the files exceed ``limit`` bytes.

    Raises:
      PipelineError: the files exceed ``limit`` bytes (the message names the folder).
    """
    files: dict[str, str] = {}
    total = 0

    def add(rel: str, path: str) -> None:
        nonlocal total
        total += fileio.size(path)
        if total > limit:
            raise PipelineError(
                f"The folder {folder} of --module_file {module_name} holds more than "
                f"{limit / 2**20:g} MiB of Python files to stage for the workers; put the "
                "module file and the helper modules it imports in a folder of their own, or "
                "raise --max_module_folder_mib."
            )
        files[rel] = path

    def visible(name: str) -> bool:
        return (
            not name.startswith(".")
            and name not in _SKIPPED_NAMES
            and not name.startswith(_TEMP_PREFIXES)
        )

    def own_code(path: str) -> bool:
        # A folder of the interpreter's libraries is never the user's code, whatever
        # folder the module file sits in (a venv without a dot in its name, say).
        return "://" in path or not is_installed_code(path)

    def walk_package(rel_dir: str, path: str) -> None:
        for name in sorted(fileio.listdir(path)):
            name = name.rstrip("/")
            if not visible(name):
                continue
            child = fileio.join(path, name)
            rel = f"{rel_dir}/{name}"
            if fileio.isdir(child):
                if own_code(child) and fileio.exists(fileio.join(child, "__init__.py")):
                    walk_package(rel, child)
            elif name.endswith(".py"):
                add(rel, child)

    for name in sorted(fileio.listdir(folder)):
        name = name.rstrip("/")
        if not visible(name):
            continue
        child = fileio.join(folder, name)
        if fileio.isdir(child):
            if own_code(child) and fileio.exists(fileio.join(child, "__init__.py")):
                walk_package(name, child)
        elif name.endswith(".py"):
            add(name, child)
    return files


def _zip(files: dict[str, bytes]) -> bytes:
    """A zip of ``files`` whose bytes depend on their names and contents only.

    Sorted names, a fixed timestamp and mode: the same folder gives the same archive, so
    its sha256 names its content (a rerun reuses the staged copy).
    """
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
    return buffer.getvalue()


def _write_once(path: str, data: bytes, digest: str) -> None:
    """Writes ``data`` to ``path`` (temp name + rename) unless a matching copy is there."""
    if fileio.exists(path):
        with fileio.open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() == digest:
                return
    fileio.makedirs(posixpath.dirname(path) if "://" in path else os.path.dirname(path))
    fileio.write_atomic(path, data)


@dataclasses.dataclass(frozen=True)
class ModuleBundle:
    """A module file and its folder's Python files, read and checked, not yet written.

    Made by :func:`bundle_module_file` before the run directory exists (so a folder too
    big fails before anything is written); :meth:`stage` writes it into a run directory.

    Attributes:
      module_file: the module file as the user named it.
      data / sha256: its bytes and their sha256.
      archive / archive_sha256: the zip of its folder's Python files and its sha256.
    """

    module_file: str
    data: bytes
    sha256: str
    archive: bytes
    archive_sha256: str

    def stage(self, run_root: str) -> StagedModule:
        """Writes the module file and the archive under ``<run_root>/module/``.

        Each copy is written to a temporary name and renamed, so a reader never sees half
        a file; a copy already there with the right sha256 is kept.
        """
        name = posixpath.basename(self.module_file.replace("\\", "/"))
        path = fileio.join(run_root, MODULE_DIR, self.sha256, name)
        archive = fileio.join(run_root, MODULE_DIR, self.archive_sha256, MODULE_FOLDER_ARCHIVE)
        _write_once(path, self.data, self.sha256)
        _write_once(archive, self.archive, self.archive_sha256)
        return StagedModule(path, self.sha256, self.module_file, archive, self.archive_sha256)


def bundle_module_file(
    module_file: str, max_folder_mib: float = DEFAULT_MAX_MODULE_FOLDER_MIB
) -> ModuleBundle:
    """Reads ``module_file`` and zips the Python files of its folder, for :meth:`stage`.

    The archive holds the folder's ``.py`` files and its packages (folders with an
    ``__init__.py``), as TFX's wheel of the module's folder does, the module file included
    with the very bytes read here; its bytes depend only on the files' names and contents,
    so its sha256 names its content.

    Raises:
      PipelineError: the module file does not exist, or its folder's Python files exceed
        ``max_folder_mib`` MiB.
    """
    data = _read_bytes(module_file, "--module_file")
    name = posixpath.basename(module_file.replace("\\", "/"))
    folder = (
        posixpath.dirname(module_file)
        if "://" in module_file
        else os.path.dirname(os.path.abspath(module_file))
    )
    limit = int(max_folder_mib * 2**20)
    contents = {
        rel: data if rel == name else _read_bytes(path, "Module folder file")
        for rel, path in _folder_python_files(folder, module_file, limit).items()
    }
    contents[name] = data  # also when its name does not end in .py
    archive = _zip(contents)
    return ModuleBundle(
        module_file,
        data,
        hashlib.sha256(data).hexdigest(),
        archive,
        hashlib.sha256(archive).hexdigest(),
    )


def stage_module_file(
    module_file: str,
    run_root: str,
    max_folder_mib: float = DEFAULT_MAX_MODULE_FOLDER_MIB,
) -> StagedModule:
    """Copies ``module_file`` and its folder's Python files into ``<run_root>/module/``.

    The module file goes to ``<run_root>/module/<sha256>/<file name>``; the ``.py`` files
    and packages of its folder (the helper modules it imports, as in TFX's penguin example)
    go, as one zip, to ``<run_root>/module/<archive sha256>/module_folder.zip``. Both sit
    beside the run's artifacts, so every worker that can read the run directory (gs:// on
    Dataflow) can read them, and both are named by their content, so a rerun of the same
    ``--run_id`` with an edited module or helper stages distinct copies.
    ``bundle_module_file(module_file, max_folder_mib).stage(run_root)``.

    Args:
      module_file: the user's module file (local or gs://).
      run_root: the run directory (``RunDirectory.root``).
      max_folder_mib: the most the folder's Python files may weigh (``--max_module_folder_mib``).

    Returns:
      the :class:`StagedModule` (paths and sha256s) to hand to the workers.

    Raises:
      PipelineError: as :func:`bundle_module_file`.
    """
    return bundle_module_file(module_file, max_folder_mib).stage(run_root)


_CACHE_PREFIX = "beam_pipeline_modules"


def _private_dir(local_dir: Optional[str]) -> str:
    """A folder to unpack verified module copies into that no other user can write.

    ``local_dir`` when given (created 0700 if missing), else
    ``<tmp>/beam_pipeline_modules-<uid>`` (``<tmp>`` is the run's own temp folder in a
    run, see :mod:`beam_pipeline.runtime.scratch`). What is there is executed without
    reading the archive again, so the folder must be this user's alone: a folder of that
    predictable name that another user made first (or that others may write) could hold
    their code; then a fresh private folder (``mkdtemp``, mode 0700) is used instead.
    """
    if local_dir is None:
        uid = os.getuid() if hasattr(os, "getuid") else 0
        local_dir = os.path.join(tempfile.gettempdir(), f"{_CACHE_PREFIX}-{uid}")
    try:
        os.makedirs(local_dir, mode=0o700, exist_ok=True)
    except OSError:
        pass  # checked below
    if _owned_privately(local_dir):
        return local_dir
    private = tempfile.mkdtemp(prefix=f"{_CACHE_PREFIX}-")
    _LOG.warning(
        "Not using %s for the staged module: another user owns it or may write to it; "
        "unpacking into %s instead.",
        local_dir,
        private,
    )
    return private


def _owned_privately(folder: str) -> bool:
    """A real folder (not a link), owned by this user, that no one else can write."""
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    if not stat.S_ISDIR(info.st_mode) or info.st_mode & 0o022:
        return False
    return not hasattr(os, "getuid") or info.st_uid == os.getuid()


def read_staged_module(path: str, sha256: str) -> bytes:
    """The bytes of a staged module file, checked against the run's fingerprint.

    Args:
      path: the staged copy (:attr:`StagedModule.path`).
      sha256: the fingerprint the run recorded (:attr:`StagedModule.sha256`).

    Raises:
      PipelineError: the file is missing or its sha256 differs (it was changed after the
        run staged it).
    """
    data = _read_bytes(path, "Staged module file")
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256:
        raise PipelineError(
            f"Staged module file {path} has sha256 {actual[:12]}, not {sha256[:12]} as this "
            "run fingerprinted, so it was changed after staging; start a new run (a new "
            "--run_id) instead of editing files in a run directory."
        )
    return data


def fetch_staged_module(path: str, sha256: str, local_dir: Optional[str] = None) -> str:
    """A local copy of a staged module file whose bytes match ``sha256``; on a worker.

    The copy is ``<local_dir>/<sha256>/<file name>`` (``local_dir`` defaults to a folder
    of this user's alone, see :func:`_private_dir`); an existing, matching copy is reused,
    so the many trials of a tuning round on one worker read the staged file once. Loading this copy
    executes exactly the verified bytes (no second read of the shared file).

    Args:
      path: the staged copy (:attr:`StagedModule.path`, local or gs://).
      sha256: the fingerprint the run recorded.
      local_dir: where to keep verified copies.

    Returns:
      the local path to load (e.g. with ``trainer.load_trainer_module``).

    Raises:
      PipelineError: as :func:`read_staged_module`.
    """
    local_dir = _private_dir(local_dir)
    folder = os.path.join(local_dir, sha256)
    local = os.path.join(folder, posixpath.basename(path))
    if os.path.exists(local):
        with open(local, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() == sha256:
                return local
    data = read_staged_module(path, sha256)
    os.makedirs(folder, exist_ok=True)
    tmp = f"{local}.tmp-{uuid.uuid4().hex[:8]}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, local)
    return local


def fetch_module_folder(archive: str, sha256: str, local_dir: Optional[str] = None) -> str:
    """A local folder holding the staged module folder's files; on a worker.

    The archive is read once, checked against ``sha256`` and unpacked into
    ``<local_dir>/<sha256>/`` (``local_dir`` defaults to a folder of this user's alone,
    see :func:`_private_dir`, so a folder of that name was unpacked by this user) through
    a temporary folder renamed into place, so a folder of that name is always complete
    and the many trials of one worker unpack it once. The caller puts the folder
    on ``sys.path`` (:func:`trainer.load_trainer_module` does), so the module's helper
    modules import as they do beside the user's file.

    Args:
      archive: the staged archive (:attr:`StagedModule.folder_archive`, local or gs://).
      sha256: its fingerprint (:attr:`StagedModule.folder_sha256`).
      local_dir: where to keep unpacked folders (made mode 0700 when missing).

    Returns:
      the local folder.

    Raises:
      PipelineError: the archive is missing or its sha256 differs.
    """
    local_dir = _private_dir(local_dir)
    folder = os.path.join(local_dir, sha256)
    if os.path.isdir(folder):
        return folder
    data = read_staged_module(archive, sha256)
    os.makedirs(local_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"{sha256[:12]}.tmp-", dir=local_dir)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            z.extractall(tmp)
        os.rename(tmp, folder)
    except OSError:
        if not os.path.isdir(folder):  # not a worker beside us that unpacked it first
            raise
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return folder
