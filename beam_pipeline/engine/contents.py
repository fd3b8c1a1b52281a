"""What a published folder holds, recorded when it is written and checked before reuse.

A publication marker (``_PUBLISHED``) says a folder was complete once; it says nothing of
what happened to it since: a file truncated by a full disk or a copy, a vocabulary
rewritten by hand, a split folder deleted. A stage's outputs are reused by later runs for
as long as they stay published, so a reuse that trusted the marker alone would feed a
damaged artifact to every later stage, silently. :func:`describe` records a folder's files
(each relative path with its size, and the content digest of each small file) in the
execution's record; :func:`changed` compares the folder with that record before a reuse.

Why sizes for large files and digests for small ones: the large files are the example
shards, which a 1M-row run has hundreds of megabytes of; hashing them at every publish and
again at every reuse would cost a few percent of the data stages for the one damage a
size misses (bytes rewritten in place at the same length), while a truncated or replaced
shard changes its size. Everything a person edits by hand (a vocabulary, a schema, the
graph's ``saved_model.pb``, the evaluator's results, a blessing) is digested: small files
always, and every file of the artifacts that decide results and are small beside the data
(the transform graph, whose vocabulary may well pass 1 MiB, and the model), whatever its
size (``TypedArtifact.DIGEST_EVERY_FILE``).

Example::

    recorded = describe("runs/a/transform_graph")
    ...
    changed("runs/a/transform_graph", recorded)   # None, or what differs, in words
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.types import PUBLISHED_MARKER

__all__ = ["SMALL_FILE_BYTES", "changed", "describe"]

# Files up to this size are digested; larger ones are recorded by their size.
SMALL_FILE_BYTES = 1 << 20


def _digest(path: str) -> str:
    import hashlib  # lazily: `--help` imports this module, not this

    digest = hashlib.blake2b(digest_size=16)
    with fileio.open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _files(folder: str, ignore: frozenset = frozenset((PUBLISHED_MARKER,))) -> dict[str, str]:
    """Relative path (``/``-separated) -> full path of every file under ``folder``, those
    in ``ignore`` excepted (the publication marker: it is written while publishing)."""
    out = {}
    for dirpath, _, names in fileio.walk(folder):
        rel_dir = dirpath[len(folder) :].strip("/").replace(os.sep, "/")
        for name in names:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if rel not in ignore:
                out[rel] = fileio.join(dirpath, name)
    return out


def describe(folder: str, small: Optional[int] = SMALL_FILE_BYTES) -> dict[str, list]:
    """``{relative path: [size, digest or None]}`` of every file under ``folder``: the
    digest (BLAKE2b-128) of each file of at most ``small`` bytes (None: of every file)."""
    out: dict[str, list] = {}
    for rel, path in sorted(_files(folder).items()):
        size = fileio.size(path)
        out[rel] = [size, _digest(path) if small is None or size <= small else None]
    return out


def changed(
    folder: str, recorded: Mapping[str, list], ignore: tuple[str, ...] = ()
) -> Optional[str]:
    """None when ``folder`` holds what ``recorded`` (:func:`describe`) says; else what
    differs, as a few words ("examples/train/data-00000-of-00001.tfrecord.gz is 210
    bytes, not 4181"); files named in ``ignore`` (relative) are not compared, on disk or
    in ``recorded``."""
    if not fileio.isdir(folder):
        return "its folder is gone"
    files = _files(folder, frozenset((PUBLISHED_MARKER, *ignore)))
    recorded = {rel: entry for rel, entry in recorded.items() if rel not in ignore}
    missing = sorted(set(recorded) - set(files))
    if missing:
        return f"{missing[0]} is missing"
    extra = sorted(set(files) - set(recorded))
    if extra:
        return f"{extra[0]} was added"
    for rel, (size, _) in sorted(recorded.items()):
        now = fileio.size(files[rel])
        if now != size:
            return f"{rel} is {now} bytes, not {size}"
    for rel, (_, digest) in sorted(recorded.items()):
        if digest is not None and _digest(files[rel]) != digest:
            return f"{rel}'s content changed"
    return None
