"""A JSON document in the run's shared storage, changed only by atomic compare-and-swap.

The search job's workers (:mod:`trainer.tuning.search_loop`) keep the oracle's state in
one such document beside the tuner project, so no worker has to reach the launcher (a
Dataflow worker usually cannot) and no oracle server runs anywhere. Every change is
:meth:`SharedState.update`: read the document, compute the new one, write it only if
nobody wrote in between, else read again and recompute.

Two stores, by the path's filesystem:

- a local path: an exclusive ``fcntl.flock`` on ``<path>.lock`` held across the read and
  the (atomic, rename-over) write, so concurrent processes on this machine take turns;
- ``gs://``: the object's generation number as the precondition of the write
  (``if_generation_match``, 0 to create), with google-cloud-storage; a write that lost the
  race fails with 412 and is retried on the new generation. ``tf.io.gfile`` (what
  :mod:`beam_pipeline.core.fileio` uses) cannot serve here: it has no conditional write,
  so two workers writing at once would each overwrite the other's change.

Other filesystems (s3://, hdfs://) have no store here: :func:`open_shared_state` says so.

Example::

    state = open_shared_state("/run/.staging/tuner/project/beam_search_state.json")
    state.create({"trials": {}})
    claimed = state.update(lambda doc: (doc | {"n": doc.get("n", 0) + 1}, doc.get("n", 0)))
    state.read()            # the current document
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import random
import time
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError

__all__ = ["SharedState", "open_shared_state"]

T = TypeVar("T")
# What update's function returns: (the new document, or None to leave it as it is; the
# value update hands back).
Change = tuple[Optional[dict[str, Any]], T]

_GCS_ATTEMPTS = 50  # a write that keeps losing the race this often is an error, not bad luck


class SharedState:
    """A JSON document changed only by compare-and-swap (the base: the common API)."""

    path: str

    def create(self, doc: dict[str, Any]) -> None:
        """Writes the first version of the document (replacing any earlier one)."""
        raise NotImplementedError

    def read(self) -> dict[str, Any]:
        """The current document."""
        raise NotImplementedError

    def update(self, change: Callable[[dict[str, Any]], Change[T]]) -> T:
        """Applies ``change`` to the current document atomically; returns its value.

        ``change`` gets a private copy of the document and returns ``(new, value)``:
        ``new`` is written only if the document did not change meanwhile (else ``change``
        runs again on the newer one, so it must have no effects beyond its return value
        that a rerun would not repeat); ``new=None`` writes nothing.
        """
        raise NotImplementedError


class _LocalState(SharedState):
    """The document on a local (or NFS) path; a lock file serializes read-change-write."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock_path = path + ".lock"

    @contextlib.contextmanager
    def _locked(self):
        # os.open and fcntl, not fileio: a lock is a local-file notion gfile does not have.
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def create(self, doc: dict[str, Any]) -> None:
        fileio.makedirs(os.path.dirname(self.path))
        with self._locked():
            fileio.write_atomic(self.path, json.dumps(doc))

    def read(self) -> dict[str, Any]:
        with self._locked():
            return json.loads(fileio.read_file(self.path))

    def update(self, change: Callable[[dict[str, Any]], Change[T]]) -> T:
        with self._locked():
            new, value = change(json.loads(fileio.read_file(self.path)))
            if new is not None:
                fileio.write_atomic(self.path, json.dumps(new))
            return value


class _GcsState(SharedState):
    """The document as a GCS object; each write is conditional on the generation read."""

    def __init__(self, path: str) -> None:
        from google.cloud import storage

        self.path = path
        bucket, _, name = path[len("gs://") :].partition("/")
        self._blob_name = name
        self._bucket = storage.Client().bucket(bucket)

    def _get(self) -> tuple[dict[str, Any], int]:
        blob = self._bucket.get_blob(self._blob_name)
        if blob is None:
            raise PipelineError(
                f"The tuner's search state {self.path} is gone; the search cannot go on: "
                "rerun the Tuner stage."
            )
        # The bytes of exactly that generation (a newer write in between fails with 412).
        data = blob.download_as_bytes(if_generation_match=blob.generation)
        return json.loads(data), int(blob.generation)

    def create(self, doc: dict[str, Any]) -> None:
        self._bucket.blob(self._blob_name).upload_from_string(
            json.dumps(doc), content_type="application/json"
        )

    def read(self) -> dict[str, Any]:
        from google.api_core import exceptions

        for _ in range(_GCS_ATTEMPTS):
            with contextlib.suppress(exceptions.PreconditionFailed):
                return self._get()[0]
        raise PipelineError(
            f"Could not read the tuner's search state {self.path}; rerun the Tuner stage."
        )

    def update(self, change: Callable[[dict[str, Any]], Change[T]]) -> T:
        from google.api_core import exceptions

        for attempt in range(_GCS_ATTEMPTS):
            try:
                doc, generation = self._get()
                new, value = change(doc)
                if new is None:
                    return value
                self._bucket.blob(self._blob_name).upload_from_string(
                    json.dumps(new),
                    content_type="application/json",
                    if_generation_match=generation,
                )
                return value
            except exceptions.PreconditionFailed:
                # Another worker wrote first: back off a little (jittered), then redo.
                time.sleep(min(2.0, 0.05 * 2**attempt) * random.random())
        raise PipelineError(
            f"{_GCS_ATTEMPTS} writes of the tuner's search state {self.path} in a row lost to "
            "other workers' writes; pass a smaller --tuner_parallel_trials."
        )


def open_shared_state(path: str) -> SharedState:
    """The store for ``path``: a lock file for a local path, generations for ``gs://``.

    Raises:
      PipelineError: another filesystem (no compare-and-swap store for it here).
    """
    if path.startswith("gs://"):
        return _GcsState(path)
    if fileio.is_remote(path):
        scheme = path.split("://", 1)[0]
        raise PipelineError(
            f"The search_job tuner schedule keeps its state in the run's storage, which must "
            f"be a local path or gs://, not {scheme}:// ({path}); pass "
            "--tuner_schedule=rolling for this pipeline root."
        )
    return _LocalState(path)
