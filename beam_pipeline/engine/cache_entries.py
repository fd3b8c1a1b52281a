"""Kill-safe entries of a cache folder shared by the runs under one pipeline root.

A cache entry (``<cache>/<key>/``) is never written where it is read: a job writes into a
private sibling folder ``.partial-<host>-<pid>-<id>/``; :func:`publish` records the
entry's listing (``_COMPLETE``: every file's size, and the digest of each file up to
``small`` bytes, written last) and moves it into place (a rename on a local disk; on an
object store a copy with the listing last, the listing being what makes it valid).
:func:`valid_listing` checks a published entry against its listing before any reuse and
removes a partial, damaged or unmarked one, so a half-written entry is never read: the
same rule as the runner's checks of published artifacts (``engine.contents``).
:func:`remove_abandoned` deletes the private folders of killed processes of this machine.

Used by tf.Transform's analyzer cache (``stages/transform/analyzer_cache.py``) and the
per-span ExampleGen + Statistics cache (``stages/common/span_cache.py``).

Example::

    listing, problem = valid_listing(final, required="span.json")
    if listing is None:
        work = new_work_dir(cache_dir)
        ...                                   # write <work>/<key>/
        publish(fileio.join(work, key), final, work)
        fileio.rmtree(work)
"""

from __future__ import annotations

import json
import logging
import os
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.engine.contents import SMALL_FILE_BYTES, changed, describe

__all__ = [
    "COMPLETE_MARKER",
    "new_work_dir",
    "publish",
    "remove_abandoned",
    "valid_listing",
]

COMPLETE_MARKER = "_COMPLETE"
_PARTIAL = ".partial-"
_LOG = logging.getLogger(__name__)


def _host() -> str:
    import socket  # lazily: `--help` imports this module, not this

    return socket.gethostname()


def _suffix() -> str:
    import uuid

    return uuid.uuid4().hex[:8]


def _owner() -> str:
    return f"{_host()}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def new_work_dir(cache_dir: str) -> str:
    """A new private folder beside the entries of ``cache_dir`` (created), this process's."""
    fileio.makedirs(cache_dir)
    work = fileio.join(cache_dir, f"{_PARTIAL}{_owner()}-{_suffix()}")
    fileio.makedirs(work)
    return work


def valid_listing(final: str, required: str) -> tuple[Optional[dict], Optional[str]]:
    """(the published entry's listing, None) when ``final`` is whole and holds
    ``required``; (None, why) when it is not, the entry being removed (logged); (None,
    None) when there is none."""
    if not fileio.exists(final):
        return None, None
    marker = fileio.join(final, COMPLETE_MARKER)
    problem = None
    listing: dict = {}
    try:
        listing = json.loads(fileio.read_file(marker))["files"]
    except FileNotFoundError:
        problem = "it was never completed (its job was stopped while writing it)"
    except Exception as e:  # noqa: BLE001  unreadable: as damaged
        problem = f"its listing cannot be read ({e})"
    else:
        problem = changed(final, listing, ignore=(COMPLETE_MARKER,))
    if problem is None and required not in listing:
        problem = f"it has no {required}"
    if problem is None:
        return listing, None
    # Logged, not a warning: nothing is wrong with this run (the entry is computed anew).
    _LOG.info("Removed the cache entry %s: %s.", final, problem)
    try:
        fileio.rmtree(final)
    except Exception as e:  # noqa: BLE001  left: it is never read without its marker
        _LOG.warning("Could not delete %s (%s).", final, e)
    return None, problem


def publish(entry: str, final: str, work_dir: str, small: int = SMALL_FILE_BYTES) -> dict:
    """Records ``entry``'s listing and moves it to ``final``; returns the listing.

    ``work_dir`` is the private folder ``entry`` is in (a replaced entry is moved there, to
    be deleted with it)."""
    for name in fileio.listdir(entry):
        if name.rstrip("/").startswith("beam-temp-"):  # a sink's leftover, if any
            fileio.rmtree(fileio.join(entry, name.rstrip("/")))
    listing = describe(entry, small=small)
    marker = json.dumps({"files": listing}, sort_keys=True)
    if fileio.is_remote(entry):
        if fileio.exists(final):
            fileio.rmtree(final)
        for rel in listing:
            dst = fileio.join(final, rel)
            fileio.makedirs(dst.rsplit("/", 1)[0])
            fileio.copy(fileio.join(entry, rel), dst, overwrite=True)
        fileio.write_atomic(fileio.join(final, COMPLETE_MARKER), marker)
        return listing
    with fileio.open(fileio.join(entry, COMPLETE_MARKER), "w") as f:
        f.write(marker)
    # Out of the way first (a folder cannot be renamed over a full one), into this job's
    # own folder, deleted with it. Another run's publish may move or replace it meanwhile:
    # theirs is as valid, so a lost race is left at that.
    if fileio.exists(final):
        try:
            fileio.rename(final, fileio.join(work_dir, f"replaced-{_suffix()}"))
        except Exception:  # noqa: BLE001, S110  moved by a concurrent publish
            pass
    try:
        fileio.rename(entry, final)
    except Exception as e:  # noqa: BLE001  another run published first
        _LOG.info("Cache entry %s kept as another run published it (%s).", final, e)
    return listing


def remove_abandoned(cache_dir: str) -> None:
    """Deletes the private folders of killed processes of this machine."""
    if fileio.is_remote(cache_dir) or not fileio.exists(cache_dir):
        return  # on an object store, whose process it was is not known here
    prefix = f"{_PARTIAL}{_host()}-"
    for name in fileio.listdir(cache_dir):
        name = name.rstrip("/")
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                fileio.rmtree(fileio.join(cache_dir, name))
            except Exception as e:  # noqa: BLE001
                _LOG.warning("Could not delete %s (%s).", name, e)
