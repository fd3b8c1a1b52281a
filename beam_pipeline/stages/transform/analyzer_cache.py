"""tf.Transform's analyzer cache under ``<pipeline_root>/cache/transform/``, kill-safe.

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

    cache = AnalyzerCache(run_dir.cache_path("transform"), "train-3f2a...")
    base = cache.open()            # give it to Read/WriteAnalysisCacheToFS
    ...                            # build and run the Transform job
    cache.publish()                # or cache.discard() when it failed
"""

from __future__ import annotations

import json
import logging
import os
import socket
import uuid
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.engine.contents import changed, describe

__all__ = ["AnalyzerCache", "COMPLETE_MARKER"]

COMPLETE_MARKER = "_COMPLETE"
_PARTIAL = ".partial-"
_MANIFEST = "MANIFEST"  # tf.Transform's own (analyzer_cache._ManifestFile)
_LOG = logging.getLogger(__name__)


def _owner() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class AnalyzerCache:
    """One dataset key's entry of the analyzer cache folder (see the module docstring).

    Args:
      cache_dir: the analyzer cache folder (``<pipeline_root>/cache/transform``).
      key: the dataset key (``transforms.transform.dataset_cache_key(...).key``).
    """

    def __init__(self, cache_dir: str, key: str):
        self.cache_dir = cache_dir
        self.key = key
        self.final = fileio.join(cache_dir, key)
        self.work_dir: Optional[str] = None
        # The files of the published entry the job started from (empty: none).
        self.before: frozenset[str] = frozenset()
        self.after: frozenset[str] = frozenset()
        # Why a published entry was removed unread (None: it was not).
        self.removed: Optional[str] = None

    def open(self) -> str:
        """Prepares the private folder the job reads and writes; returns it."""
        fileio.makedirs(self.cache_dir)
        self._remove_abandoned()
        listing = self._valid_listing()
        self.work_dir = fileio.join(self.cache_dir, f"{_PARTIAL}{_owner()}-{uuid.uuid4().hex[:8]}")
        work = fileio.join(self.work_dir, self.key)
        fileio.makedirs(work)
        if listing:
            try:
                for rel in listing:
                    dst = fileio.join(work, rel)
                    fileio.makedirs(os.path.dirname(dst))
                    fileio.copy(fileio.join(self.final, rel), dst)
            except Exception as e:  # noqa: BLE001  replaced meanwhile by another run's
                _LOG.info("Analyzer cache %s not read (%s); analyzing anew.", self.final, e)
                fileio.rmtree(work)
                fileio.makedirs(work)
                listing = {}
        self.before = frozenset(listing)
        return self.work_dir

    def publish(self) -> None:
        """Makes the job's entry the published one (after the job succeeded)."""
        if self.work_dir is None:
            return
        entry = fileio.join(self.work_dir, self.key)
        if not fileio.exists(fileio.join(entry, _MANIFEST)):
            self.discard()  # nothing was cached (no analyzer to cache)
            return
        for name in fileio.listdir(entry):
            if name.rstrip("/").startswith("beam-temp-"):  # a sink's leftover, if any
                fileio.rmtree(fileio.join(entry, name.rstrip("/")))
        listing = describe(entry, small=1 << 62)  # every file digested: they are small
        self.after = frozenset(listing)
        if listing.keys() == self.before and self.before:
            self.discard()  # nothing added: the published entry is this one's copy
            return
        marker = json.dumps({"files": listing}, sort_keys=True)
        if fileio.is_remote(entry):
            self._copy_into_place(entry, listing, marker)
        else:
            self._rename_into_place(entry, marker)
        self.discard()

    def discard(self) -> None:
        """Deletes the private folder (a failed job's, or what :meth:`publish` left)."""
        if self.work_dir is not None and fileio.exists(self.work_dir):
            try:
                fileio.rmtree(self.work_dir)
            except Exception as e:  # noqa: BLE001  never over the run's own error
                _LOG.warning("Could not delete %s (%s).", self.work_dir, e)
        self.work_dir = None

    def _rename_into_place(self, entry: str, marker: str) -> None:
        with fileio.open(fileio.join(entry, COMPLETE_MARKER), "w") as f:
            f.write(marker)
        # Out of the way first (a folder cannot be renamed over a full one), into this
        # job's own folder, which discard() deletes. Another run's publish may move or
        # replace it meanwhile: theirs is as valid, so a lost race is left at that.
        if fileio.exists(self.final):
            try:
                fileio.rename(self.final, fileio.join(self.work_dir, "replaced"))
            except Exception:  # noqa: BLE001, S110  moved by a concurrent publish
                pass
        try:
            fileio.rename(entry, self.final)
        except Exception as e:  # noqa: BLE001  another run published first
            _LOG.info("Analyzer cache %s kept as another run published it (%s).", self.final, e)

    def _copy_into_place(self, entry: str, listing: dict, marker: str) -> None:
        if fileio.exists(self.final):
            fileio.rmtree(self.final)
        for rel in listing:
            dst = fileio.join(self.final, rel)
            fileio.makedirs(dst.rsplit("/", 1)[0])
            fileio.copy(fileio.join(entry, rel), dst, overwrite=True)
        fileio.write_atomic(fileio.join(self.final, COMPLETE_MARKER), marker)

    def _valid_listing(self) -> dict:
        """The published entry's listing when it is whole; else {} (a broken one removed)."""
        if not fileio.exists(self.final):
            return {}
        marker = fileio.join(self.final, COMPLETE_MARKER)
        problem = None
        listing: dict = {}
        try:
            listing = json.loads(fileio.read_file(marker))["files"]
        except FileNotFoundError:
            problem = "it was never completed (its job was stopped while writing it)"
        except Exception as e:  # noqa: BLE001  unreadable: as damaged
            problem = f"its listing cannot be read ({e})"
        else:
            problem = changed(self.final, listing, ignore=(COMPLETE_MARKER,))
        if problem is None and _MANIFEST not in listing:
            problem = f"it has no {_MANIFEST}"
        if problem is None:
            return listing
        # Noted in the stage's row, logged to the run's log: not a warning, as nothing is
        # wrong with this run (the analysis runs anew).
        self.removed = problem
        _LOG.info("Removed the analyzer cache entry %s: %s.", self.final, problem)
        try:
            fileio.rmtree(self.final)
        except Exception as e:  # noqa: BLE001  left: it is never read without its marker
            _LOG.warning("Could not delete %s (%s).", self.final, e)
        return {}

    def _remove_abandoned(self) -> None:
        """Deletes the private folders of killed processes of this machine."""
        if fileio.is_remote(self.cache_dir):
            return  # whose process it was is not known here
        prefix = f"{_PARTIAL}{socket.gethostname()}-"
        for name in fileio.listdir(self.cache_dir):
            name = name.rstrip("/")
            if not name.startswith(prefix):
                continue
            pid = name[len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                try:
                    fileio.rmtree(fileio.join(self.cache_dir, name))
                except Exception as e:  # noqa: BLE001
                    _LOG.warning("Could not delete %s (%s).", name, e)
