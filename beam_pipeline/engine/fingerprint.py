"""Content digests: what every cache key and a run's identity are derived from.

A key made of file metadata (path, size, modification time) is wrong both ways: a copy of
the same data elsewhere misses, and data changed in place with the same size and time (a
restore from backup, ``cp -p``, a sync tool, an object store with coarse times) hits and
silently reuses results of other data. So keys here are digests of the bytes: BLAKE2b
(256-bit), as strong as SHA-256 and faster on CPUs without SHA instructions.

Files are read through Beam's filesystems (local, ``gs://``, ...) as stored, without
decompressing (a ``.gz`` file's compressed bytes identify its content as well and are
fewer). Hashing runs on the launcher before any job, a small share of the data stage
that reads the same bytes (benchmarks/README.md).

Example::

    digest = files_digest(["data/a.csv", "data/b.csv"])   # same bytes -> same digest
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio

__all__ = [
    "file_digest",
    "files_digest",
    "folder_digest",
    "json_digest",
    "pipeline_code",
    "sources_digest",
]

_CHUNK = 4 << 20  # 4 MiB reads: large enough that hashing, not Python, sets the pace


def _hasher():
    import hashlib  # lazily: `--help` imports this module, not this

    return hashlib.blake2b(digest_size=32)


def file_digest(path: str, *, sha256: bool = False) -> str:
    """The BLAKE2b-256 digest of a file's stored bytes (hex); SHA-256 when ``sha256``.

    SHA-256 is what names a staged module file (``module_staging.stage_module_file``), so a run
    identifies its module by the same digest.
    """
    import hashlib

    digest = hashlib.sha256() if sha256 else _hasher()
    with _open_stored(path) as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _open_stored(path: str):
    """``path``'s stored bytes: a local file opened as it is (the same bytes Beam's
    LocalFileSystem reads, without importing Beam, which a rerun that reuses every stage
    would import for this alone: issue 45); another scheme through Beam's filesystems."""
    if "://" not in path:
        return open(path, "rb")  # noqa: SIM115  the caller's with closes it
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def files_digest(paths: Iterable[str]) -> str:
    """One digest of several files' contents, in the given order; their paths do not count."""
    digest = _hasher()
    for path in paths:
        digest.update(file_digest(path).encode() + b"\n")
    return digest.hexdigest()


def folder_digest(folder: str, suffix: str = "") -> str:
    """One digest of every file under ``folder`` (whose name ends with ``suffix``):
    relative paths and contents."""

    digest = _hasher()
    entries = []
    for dirpath, _, files in fileio.walk(folder):
        entries.extend(fileio.join(dirpath, f) for f in files if f.endswith(suffix))
    for path in sorted(entries):
        digest.update(f"{path[len(folder) :]}|{file_digest(path)}\n".encode())
    return digest.hexdigest()


def json_digest(value: Any) -> str:
    """The digest of a JSON value written canonically (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    digest = _hasher()
    digest.update(text.encode("utf-8"))
    return digest.hexdigest()


# The distributions whose code decides what a stage writes besides this project's own.
_LIBRARIES = (
    "apache-beam",
    "keras",
    "keras-tuner",
    "numpy",
    "pyarrow",
    "tensorflow",
    "tensorflow-metadata",
    "tensorflow-model-analysis",
    "tensorflow-transform",
    "tf-keras",
    "tfx-bsl",
)


def sources_digest(roots: Sequence[str]) -> str:
    """One digest of the ``.py`` files under local folders ``roots``: paths and bytes."""
    return json_digest({os.path.basename(r): folder_digest(r, suffix=".py") for r in roots})


@functools.cache
def pipeline_code() -> str:
    """What every stage's cache key holds of the code that runs it (made once per process).

    The digest of this project's Python sources (``beam_pipeline``, ``transforms``,
    ``trainer``, as installed) and of the installed versions of the libraries that write
    the artifacts (Beam, TensorFlow, tf.Transform, tfx-bsl, Keras, ...). A version number
    alone would let a changed checkout of the same version reuse results its bug fix
    would change; the sources' bytes cannot. So an upgrade, or any edit of the project's
    code (a comment too), reruns every stage once: a result of other code is never reused.
    """
    import importlib.util

    # Found, not imported: ``trainer`` imports TensorFlow, which ``runs`` commands avoid.
    roots = [
        importlib.util.find_spec(name).submodule_search_locations[0]
        for name in ("beam_pipeline", "transforms", "trainer")
    ]
    from importlib import metadata  # only here: importing it is slow, and --help needs it not

    versions = {}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return json_digest({"sources": sources_digest(roots), "libraries": versions})


def stage_code(stage: object) -> Optional[str]:
    """The digest of the file declaring ``stage``'s class when it is not this project's (a
    stage of the user's own, ``--graph``): :func:`pipeline_code` covers this project's
    sources only, and an edited stage must not reuse what its old code made. None for
    this project's stages."""
    import inspect

    module = type(stage).__module__.split(".")[0]
    if module in ("beam_pipeline", "transforms", "trainer"):
        return None
    try:
        path = inspect.getsourcefile(type(stage))
    except TypeError:  # defined where no file holds it (an interactive session)
        return None
    return file_digest(path) if path else None
