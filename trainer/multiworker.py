"""Multi-worker training: N workers meet through the run's storage and train one model.

Each worker (one per rank, ``0 .. N-1``) runs attempts of the same training until one
finishes. In an attempt, a process of its own (:func:`trainer.isolation.run_isolated`):

1. binds a free port and publishes ``host:port`` for its rank and attempt with an atomic
   create, ``<model_run_dir>/rendezvous/attempt-<k>/rank-<i>`` (a local path: a hard link
   that fails when the name exists; ``gs://``: a write conditional on generation 0, as the
   tuner's shared state does), so no cluster manager or launcher address is needed;
2. waits (bounded by ``--train_rendezvous_timeout``) until all N ranks published, then
   sets ``TF_CONFIG`` (rank 0 is the chief) and trains the module's ``TrainSpec`` under
   ``MultiWorkerMirroredStrategy``, with the runner's own loop (:mod:`trainer.loop`);
3. the chief checkpoints into ``model_run/`` and exports the SavedModel; the others write
   theirs to a scratch folder that is removed.

A worker whose attempt fails (its process died, or training raised) writes
``attempt-<k>/failed-<i>``; every other worker watching that attempt stops its process at
once (collectives cannot go on without a peer), and all meet again under ``attempt-<k+1>``,
restoring the chief's latest checkpoint, so the steps done before it are not repeated.
After ``1 + --train_worker_retries`` attempts the training fails with one sentence. A user
error (the module raised) is not retried: its marker says so and every worker reports it.

Example::

    settings = WorkerSettings(workers=2, retries=2, rendezvous_timeout=300.0)
    result = train_rank(job, rank=0, settings=settings)   # the chief's TrainingResult
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from trainer.isolation import UserCodeExit, run_isolated
from trainer.loop import ATTEMPT_ENV
from trainer.process import worker_name
from trainer.run_training import TrainingJob, TrainingResult, read_result, run_trainer

__all__ = [
    "RENDEZVOUS_SUBDIR",
    "WorkerSettings",
    "attempt_dir",
    "publish_address",
    "train_rank",
    "wait_for_ranks",
]

RENDEZVOUS_SUBDIR = "rendezvous"
_POLL_S = 0.2
# TensorFlow errors of a collective whose peer is gone (or that was cut short): the
# attempt is lost, not the user's code wrong, so a new attempt may succeed.
_LOST_PEER_ERRORS = (
    "UnavailableError",
    "DeadlineExceededError",
    "CancelledError",
    "AbortedError",
    "InternalError",
)


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """How the workers of one training meet and retry.

    Attributes:
      workers: the number of workers (ranks), at least 2.
      retries: attempts after the first when a worker is lost.
      rendezvous_timeout: seconds a worker waits for the others to publish.
      timeout: seconds one attempt may train (``--trainer_timeout``; None: no limit).
    """

    workers: int
    retries: int = 2
    rendezvous_timeout: float = 300.0
    timeout: Optional[float] = None


def attempt_dir(model_run_dir: str, attempt: int) -> str:
    """The rendezvous folder of one attempt."""
    return fileio.join(model_run_dir, RENDEZVOUS_SUBDIR, f"attempt-{attempt}")


def _create_exclusive(path: str, text: str) -> bool:
    """Creates ``path`` holding ``text`` unless it exists (atomically); True when created."""
    if path.startswith("gs://"):
        from google.api_core import exceptions
        from google.cloud import storage

        bucket, _, name = path[len("gs://") :].partition("/")
        try:
            storage.Client().bucket(bucket).blob(name).upload_from_string(
                text, if_generation_match=0
            )
        except exceptions.PreconditionFailed:
            return False
        return True
    if fileio.is_remote(path):
        scheme = path.split("://", 1)[0]
        raise PipelineError(
            f"--train_workers meets through the run's storage, which must be a local path or "
            f"gs://, not {scheme}:// ({path}); pass --train_workers=1 for this pipeline root."
        )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Written beside, then hard-linked: the name appears whole, and only once.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def publish_address(model_run_dir: str, attempt: int, rank: int, address: str) -> None:
    """Publishes ``address`` (``host:port``) for ``rank`` in ``attempt``.

    Raises:
      PipelineError: the rank already published in that attempt (two workers of one rank).
    """
    path = fileio.join(attempt_dir(model_run_dir, attempt), f"rank-{rank}")
    doc = json.dumps({"address": address, "worker": worker_name()})
    if not _create_exclusive(path, doc):
        raise PipelineError(
            f"Rank {rank} of the training already published its address in {path} "
            f"(attempt {attempt}): two workers ran as one rank; rerun with the same --run_id."
        )


def _failures(model_run_dir: str, attempt: int) -> list[dict]:
    pattern = fileio.join(attempt_dir(model_run_dir, attempt), "failed-*")
    found = []
    for path in sorted(fileio.glob(pattern)):
        try:
            found.append(json.loads(fileio.read_file(path)))
        except ValueError:  # being written: the next look reads it
            continue
    return found


def _mark_failed(model_run_dir: str, attempt: int, rank: int, message: str, fatal: bool) -> None:
    path = fileio.join(attempt_dir(model_run_dir, attempt), f"failed-{rank}")
    _create_exclusive(path, json.dumps({"rank": rank, "message": message, "fatal": fatal}))


def wait_for_ranks(model_run_dir: str, attempt: int, workers: int, timeout: float) -> list[str]:
    """The addresses of all ``workers`` ranks of ``attempt``, in rank order, once published.

    Raises:
      PipelineError: not all published within ``timeout`` seconds (naming the missing
        ranks), or a worker failed the attempt meanwhile.
    """
    folder = attempt_dir(model_run_dir, attempt)
    deadline = time.monotonic() + timeout
    while True:
        names = set(fileio.listdir(folder)) if fileio.isdir(folder) else set()
        if all(f"rank-{i}" in names for i in range(workers)):
            return [
                json.loads(fileio.read_file(fileio.join(folder, f"rank-{i}")))["address"]
                for i in range(workers)
            ]
        failed = _failures(model_run_dir, attempt)
        if failed:
            raise PipelineError(failed[0]["message"])
        if time.monotonic() >= deadline:
            missing = ", ".join(str(i) for i in range(workers) if f"rank-{i}" not in names)
            raise PipelineError(
                f"Training rank(s) {missing} of --train_workers={workers} did not publish an "
                f"address in {folder} within --train_rendezvous_timeout={timeout:g} s; check "
                f"that {workers} workers can start (on Dataflow: quotas, --max_num_workers) "
                "or raise --train_rendezvous_timeout."
            )
        time.sleep(_POLL_S)


def _host() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _collective_timeout(settings: WorkerSettings) -> float:
    # A collective whose peer is gone must end: long enough for the slowest worker's
    # first trace of the step, short enough not to hang a lost attempt for long.
    return max(60.0, settings.rendezvous_timeout)


def _worker_main(
    job: TrainingJob, rank: int, settings: WorkerSettings, attempt: int, doing: Callable
) -> Optional[TrainingResult]:
    """One rank's attempt, in a process of its own: meet, set TF_CONFIG, train."""
    import tensorflow as tf

    doing(f"Training rank {rank} (attempt {attempt}), meeting the others,")
    address = f"{_host()}:{_free_port()}"
    publish_address(job.model_run_dir, attempt, rank, address)
    cluster = wait_for_ranks(
        job.model_run_dir, attempt, settings.workers, settings.rendezvous_timeout
    )
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": rank}}
    )
    os.environ[ATTEMPT_ENV] = str(attempt)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            timeout_seconds=_collective_timeout(settings)
        )
    )
    scratch = None
    if rank:
        scratch = tempfile.mkdtemp(prefix=f"train-rank-{rank}-")
    try:
        result = run_trainer(job, doing, strategy=strategy, scratch=scratch)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    return result if rank == 0 else None


def _is_lost_peer(error: PipelineError) -> bool:
    return isinstance(error, UserCodeExit) or any(name in str(error) for name in _LOST_PEER_ERRORS)


def _first_attempt(model_run_dir: str, rank: int) -> int:
    """The first attempt this rank has not joined and that has not failed (a worker that
    Beam retried rejoins the others at their current attempt)."""
    attempt = 0
    while fileio.exists(fileio.join(attempt_dir(model_run_dir, attempt), f"rank-{rank}")) or (
        _failures(model_run_dir, attempt)
    ):
        attempt += 1
    return attempt


def train_rank(job: TrainingJob, rank: int, settings: WorkerSettings) -> Optional[TrainingResult]:
    """Runs ``rank``'s attempts until one trains to the end.

    Returns:
      the chief's (rank 0's) :class:`TrainingResult`; None for the other ranks.

    Raises:
      PipelineError: a user error in the module (not retried), a rendezvous timeout, or
        the last attempt failed too.
    """
    first = _first_attempt(job.model_run_dir, rank)
    last_error = ""
    for attempt in range(first, settings.retries + 1):
        if attempt > first and read_result(job.model_run_dir) is not None:
            return None  # the chief finished (this rank failed after it): nothing to redo

        def others_failed(attempt=attempt) -> Optional[str]:
            failed = [f for f in _failures(job.model_run_dir, attempt) if f["rank"] != rank]
            return f"rank {failed[0]['rank']}: {failed[0]['message']}" if failed else None

        try:
            return run_isolated(
                _worker_main,
                (job, rank, settings, attempt),
                what=f"Training rank {rank} (attempt {attempt}) of {job.module_file}",
                timeout=settings.timeout,
                timeout_flag="--trainer_timeout",
                name=f"trainer-rank-{rank}",
                abort=others_failed,
            )
        except PipelineError as e:
            aborted = others_failed()
            fatal = not aborted and not _is_lost_peer(e)
            _mark_failed(job.model_run_dir, attempt, rank, str(e), fatal)
            failures = _failures(job.model_run_dir, attempt)
            if fatal or any(f["fatal"] for f in failures):
                message = next((f["message"] for f in failures if f["fatal"]), str(e))
                raise PipelineError(message) from None
            last_error = aborted or f"rank {rank}: {e}"
    raise PipelineError(
        f"Training with --train_workers={settings.workers} lost a worker in each of its "
        f"{settings.retries + 1} attempts (--train_worker_retries={settings.retries}), the "
        f"last with {last_error.rstrip('.')}; raise --train_worker_retries or find what ends "
        "the workers in their logs."
    )
