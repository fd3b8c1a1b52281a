"""tf.Transform's analyzer cache under ``<pipeline_root>/cache/transform/``, kill-safe.

One entry per dataset key: the train split's content, or with a ``{SPAN}`` input one per
span (TFX's Transform keys its cache per input the same way), so a window that moved by
one span analyzes only the new span and reads the others' analyzer outputs from the
cache.

tf.Transform writes its cache entry (``<cache>/<dataset key>/``: a ``MANIFEST`` naming
the entries, their sharded files, ``metadata``) in place: the ``MANIFEST`` when the job is
built, the shards as the job runs. A job killed or interrupted in between leaves a
``MANIFEST`` naming shards that were never written, and every later run on the same data
fails reading them (``No files found based on the file pattern .../0-*-of-*``). So here an
entry is never written where it is read:

- :meth:`AnalyzerCache.open` checks the published entry against the listing its writer
  recorded (``_COMPLETE``: every file's size and digest, written last); a partial,
  damaged or unmarked entry is removed (logged) and the analysis runs as with no cache.
  A valid entry is copied into a private sibling folder ``.partial-<host>-<pid>-<id>/``,
  which the job reads and adds its new entries to (tf.Transform merges into the
  ``MANIFEST`` it finds there);
- :meth:`AnalyzerCache.publish`, after the job succeeded, writes the listing and moves
  the sibling's entry into place (a rename on a local disk; on an object store the files
  are copied and the listing last, the listing being what makes it valid);
- :meth:`AnalyzerCache.discard` (a failed or interrupted job) deletes the sibling; one
  left by a killed process of this machine is deleted by the next :meth:`open`.

Example::

    cache = AnalyzerCache(run_dir.cache_path("transform"), ["span-3f2a...", "span-91c0..."])
    base = cache.open()            # give it to Read/WriteAnalysisCacheToFS
    ...                            # build and run the Transform job
    cache.publish()                # or cache.discard() when it failed
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Optional, Union

from beam_pipeline.core import fileio
from beam_pipeline.engine.cache_entries import (
    COMPLETE_MARKER,
    new_work_dir,
    publish,
    remove_abandoned,
    valid_listing,
)

__all__ = ["AnalyzerCache", "COMPLETE_MARKER"]

_MANIFEST = "MANIFEST"  # tf.Transform's own (analyzer_cache._ManifestFile)
_LOG = logging.getLogger(__name__)


class AnalyzerCache:
    """Dataset keys' entries of the analyzer cache folder (see the module docstring).

    Args:
      cache_dir: the analyzer cache folder (``<pipeline_root>/cache/transform``).
      keys: the dataset keys (``transforms.transform.dataset_cache_key(...).key``): one,
        or one per span of the input.
    """

    def __init__(self, cache_dir: str, keys: Union[str, Sequence[str]]):
        self.cache_dir = cache_dir
        self.keys = (keys,) if isinstance(keys, str) else tuple(keys)
        self.work_dir: Optional[str] = None
        # Per key, the files of the published entry the job started from (empty: none).
        self.before: dict[str, frozenset[str]] = {}
        self.after: dict[str, frozenset[str]] = {}
        # Per key, why a published entry was removed unread.
        self.removed: dict[str, str] = {}

    def final(self, key: str) -> str:
        return fileio.join(self.cache_dir, key)

    def open(self) -> str:
        """Prepares the private folder the job reads and writes; returns it."""
        fileio.makedirs(self.cache_dir)
        remove_abandoned(self.cache_dir)
        self.work_dir = new_work_dir(self.cache_dir)
        for key in self.keys:
            listing, problem = valid_listing(self.final(key), _MANIFEST)
            if problem:
                self.removed[key] = problem
            work = fileio.join(self.work_dir, key)
            fileio.makedirs(work)
            if listing:
                try:
                    for rel in listing:
                        dst = fileio.join(work, rel)
                        fileio.makedirs(os.path.dirname(dst))
                        fileio.copy(fileio.join(self.final(key), rel), dst)
                except Exception as e:  # noqa: BLE001  replaced meanwhile by another run's
                    _LOG.info("Analyzer cache %s not read (%s); analyzing anew.", key, e)
                    fileio.rmtree(work)
                    fileio.makedirs(work)
                    listing = {}
            self.before[key] = frozenset(listing or {})
        return self.work_dir

    def publish(self) -> None:
        """Makes the job's entries the published ones (after the job succeeded)."""
        if self.work_dir is None:
            return
        for key in self.keys:
            entry = fileio.join(self.work_dir, key)
            if not fileio.exists(fileio.join(entry, _MANIFEST)):
                continue  # nothing was cached (no analyzer to cache)
            for name in fileio.listdir(entry):
                if name.rstrip("/").startswith("beam-temp-"):  # a sink's leftover, if any
                    fileio.rmtree(fileio.join(entry, name.rstrip("/")))
            files = frozenset(_relative_files(entry))
            self.after[key] = files
            if files == self.before[key] and files:
                continue  # nothing added: the published entry is this one's copy
            # Every file digested: they are small.
            publish(entry, self.final(key), self.work_dir, small=1 << 62)
        self.discard()

    def discard(self) -> None:
        """Deletes the private folder (a failed job's, or what :meth:`publish` left)."""
        if self.work_dir is not None and fileio.exists(self.work_dir):
            try:
                fileio.rmtree(self.work_dir)
            except Exception as e:  # noqa: BLE001  never over the run's own error
                _LOG.warning("Could not delete %s (%s).", self.work_dir, e)
        self.work_dir = None

    def reused(self, key: str) -> bool:
        """Whether the job recomputed nothing of ``key``'s dataset (after :meth:`publish`)."""
        before = self.before.get(key, frozenset())
        after = self.after.get(key, frozenset())
        return bool(before) and (not after or after == before)


def _relative_files(folder: str) -> list[str]:
    out = []
    for dirpath, _, names in fileio.walk(folder):
        rel_dir = dirpath[len(folder) :].strip("/").replace(os.sep, "/")
        out.extend(f"{rel_dir}/{n}" if rel_dir else n for n in names)
    return out
