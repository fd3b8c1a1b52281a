"""A local worker pool: warm processes on this machine that serve many Beam jobs (DirectRunner).

Beam's own ``multi_processing`` mode starts fresh worker processes for every job, which
costs each job seconds of imports (TensorFlow, keras-tuner, tf.Transform). A
:class:`LocalWorkerPool` starts its processes once, as forks of one server process that
imported the ML stack (multiprocessing's ``forkserver``, preloading
:mod:`beam_pipeline.runtime.pool_zygote`): a process is ready in about a second and shares
the imported pages with its siblings, where a fresh interpreter pays seconds of CPU and
hundreds of MB each. Their TensorFlow thread pools are sized to share the cores; the pool
serves every job created with
:meth:`LocalWorkerPool.pipeline` as Beam EXTERNAL workers, through a gRPC dispatcher of its
own that hands the k-th worker of each job to process k (or a whole job to one process).
It reports processes that died (:meth:`LocalWorkerPool.lost_workers`) and replaces them:
the FnApiRunner would wait for a dead worker forever, so whoever runs jobs on the pool
watches it (the Tuner stage's schedules do). Nothing here is specific to one stage: any
job of the run (data, Transform, training, trials) can run on it.

One concept, the pool (its processes, their dispatcher and its shutdown), hence the length.

Example::

    with LocalWorkerPool(2, threads_per_worker=1) as pool:
        with pool.pipeline(options) as p:
            p | RunTrials(job, specs)
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Optional

import apache_beam as beam
from apache_beam.options import pipeline_options as po
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.console import quiet_environment
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.forked import fork_context as _fork_context
from beam_pipeline.core.forked import (
    fork_server_warm,
    mark_fork_server_warm,
    start_forked,
    warm_fork_server,
)
from beam_pipeline.core.gpus import (
    VISIBLE_DEVICES,
    check_gpus_per_trial,
    gpu_environment,
    host_gpus,
    worker_gpus,
)
from beam_pipeline.runtime.options import is_direct, new_options

__all__ = [
    "LocalWorkerPool",
    "fork_server_warm",
    "local_pool_size",
    "quiet_lost_workers",
    "serve_pool_worker",
    "start_forked",
    "warm_fork_server",
]


class _DropWorkerCountWarning(logging.Filter):
    """Drops the FnApiRunner's advice to use multi_processing: the pool's workers are processes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "direct_num_workers is not equal to 1" not in record.getMessage()


# The FnApiRunner's threads that read a job's data and control channels from a worker (Beam
# 2.77, pinned); when the pool stops under a job the search abandoned, they fail with a
# grpc.RpcError.
_CHANNEL_THREADS = ("read_grpc_client_inputs", "beam_control_read")
_CHANNEL_GRACE_S = 5.0


class _DropAbandonedJobNoise(logging.Filter):
    """Drops Beam's log of a data channel that broke because the pool stopped under a job."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Failed to read inputs in the data plane" not in record.getMessage()


@contextlib.contextmanager
def quiet_lost_workers():
    """While a search runs on a pool: no Beam-internal traceback for a job whose worker
    process exited (the search's watch names the trial and the exit code instead)."""
    with _quiet_abandoned_jobs():
        yield


@contextlib.contextmanager
def _quiet_abandoned_jobs():
    """While the pool stops: no Beam-internal traceback for jobs the search abandoned.

    A search that stops on an error (a trial's fatal error, too many failed trials) leaves
    the other slots' jobs running; stopping their processes breaks those jobs' data
    channels, and Beam's reader threads then print a grpc.RpcError traceback twice (a log
    line and an uncaught thread exception) on top of the error the user must read.
    """
    import grpc

    data_plane = logging.getLogger("apache_beam.runners.worker.data_plane")
    noise = _DropAbandonedJobNoise()
    previous = threading.excepthook

    def hook(args) -> None:
        thread = args.thread
        if (
            thread is not None
            and thread.name in _CHANNEL_THREADS
            and isinstance(args.exc_value, grpc.RpcError)
        ):
            return
        previous(args)

    data_plane.addFilter(noise)
    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous
        data_plane.removeFilter(noise)


def _join_channel_threads() -> None:
    """Waits (``_CHANNEL_GRACE_S`` in all) for the channel threads of jobs abandoned on
    stopped processes: they fail now, inside :func:`_quiet_abandoned_jobs`."""
    deadline = time.time() + _CHANNEL_GRACE_S
    for thread in threading.enumerate():
        if thread.name in _CHANNEL_THREADS:
            thread.join(timeout=max(0.0, deadline - time.time()))


def serve_pool_worker(threads: int, conn, log_path: str, env: dict) -> None:
    """One warm worker process: caps TF's threads, serves SDK harnesses until told to stop.

    Runs in a fork of the fork server (:mod:`beam_pipeline.runtime.pool_zygote`
    imported the ML stack there). Sends its worker-pool address through ``conn``, then
    serves until the launcher closes its end (the pool closed, or the launcher exited).

    Args:
      threads: TensorFlow intra-op threads.
      conn: this process's end of a multiprocessing pipe to the launcher.
      log_path: the file this process's standard output and error go to.
      env: the launcher's environment when it asked for this process (the fork server's
        own is the one it had when the server started).
    """
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.environ.update(env)
    tempfile.tempdir = None  # the fork server's may be cached: the launcher's TMPDIR now
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer

    from trainer.process import limit_threads, prewarm

    limit_threads(threads)
    prewarm()  # a no-op after the fork server's; imports what a failed preload left out
    address, server = BeamFnExternalWorkerPoolServicer.start(use_process=False, port=0)
    conn.send(address)
    try:
        conn.recv()
    except EOFError:  # the launcher closed its end: stop
        pass
    server.stop(0)


_OPEN_CONNS: set = set()


@atexit.register
def _release_children() -> None:
    """At exit, closes every pool process's pipe so it stops: multiprocessing's own exit
    handler joins them, and a process still waiting on an open pipe would hang the
    launcher's exit. Atexit handlers run last-registered first, and importing
    ``multiprocessing.util`` at the top of this module registered that one earlier."""
    for conn in list(_OPEN_CONNS):
        conn.close()


class _Child:
    """One pool process: a fork of the fork server, its log file and its address."""

    def __init__(
        self, index: int, threads: int, log_dir: str, label: str, gpus: Optional[str] = None
    ) -> None:
        self.index = index
        self.label = label
        self.log_path = os.path.join(log_dir, f"worker-{index}.log")
        env = gpu_environment(quiet_environment(dict(os.environ)))
        if gpus is not None:  # its own GPUs (--gpus_per_trial), applied before CUDA starts
            env[VISIBLE_DEVICES] = gpus
        self._conn, child_conn = _fork_context().Pipe()
        _OPEN_CONNS.add(self._conn)
        self.process = start_forked(
            serve_pool_worker,
            (threads, child_conn, self.log_path, env),
            name=f"{label.lower()}-worker-{index}",
        )
        child_conn.close()
        self.address: Optional[str] = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self) -> str:
        with self._lock:
            return self._read_address()

    def _read_address(self) -> str:
        if self.address is None:
            try:
                self.address = self._conn.recv()
                mark_fork_server_warm()
            except (EOFError, OSError):
                raise PipelineError(
                    f"{self.label} worker process {self.index} exited before it was ready; see "
                    f"{self.log_path} for why (out of memory, or an import error)."
                ) from None
        return self.address

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def close(self, kill: bool = False) -> None:
        """Stops the process: asked to stop (30 s, then killed), or ``kill`` at once."""
        _OPEN_CONNS.discard(self._conn)
        self._conn.close()
        if kill:
            self.process.kill()
        self.process.join(timeout=30)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()


class _Dispatcher:
    """A Beam worker-pool service that hands the k-th worker of each job to pool process k."""

    def __init__(self, pool: LocalWorkerPool) -> None:
        import grpc
        from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc
        from apache_beam.utils import thread_pool_executor

        pool_ref = pool
        lock = threading.Lock()
        started: collections.Counter = collections.Counter()

        class Servicer(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
            def StartWorker(self, request, context):  # noqa: N802  gRPC method name
                with lock:
                    k = started[request.control_endpoint.url]
                    started[request.control_endpoint.url] += 1
                child = pool_ref._children[k % len(pool_ref._children)]
                try:
                    address = child.wait_ready()
                    with grpc.insecure_channel(address) as channel:
                        stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)
                        return stub.StartWorker(request, timeout=60)
                except (PipelineError, grpc.RpcError) as e:
                    return beam_fn_api_pb2.StartWorkerResponse(error=str(e))

            def StopWorker(self, request, context):  # noqa: N802  gRPC method name
                return beam_fn_api_pb2.StopWorkerResponse()

        self._server = grpc.server(thread_pool_executor.shared_unbounded_instance())
        port = self._server.add_insecure_port("localhost:0")
        beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(
            Servicer(), self._server
        )
        self._server.start()
        self.endpoint = f"localhost:{port}"

    def stop(self) -> None:
        self._server.stop(0)


class LocalWorkerPool:
    """Warm worker processes on this machine that serve many Beam jobs (DirectRunner).

    Each process is a fork of a server that imported TensorFlow and keras-tuner once, with
    TensorFlow's thread pools capped to ``threads_per_worker`` after the fork; every job
    created with :meth:`pipeline` runs its bundles there (one Beam worker per process)
    through Beam's EXTERNAL environment, so a search's rounds pay no process start-up.
    Start it early to hide its start-up behind other work.

    Example::

        with LocalWorkerPool(2, threads_per_worker=1) as pool:
            with pool.pipeline(options) as p:
                p | RunTrials(job, specs)

    Args:
      num_workers: worker processes.
      threads_per_worker: TensorFlow intra-op threads of each (0: TensorFlow's default).
      label: what messages call its processes ("Tuner worker process 1 exited ...") and
        the prefix of its log folder; the Tuner stage's pool by default.
      gpus_per_worker: on a host with several GPUs, each process gets this many of its own
        (``CUDA_VISIBLE_DEVICES``); 0, or one GPU: every process sees every GPU.

    Raises:
      PipelineError: fewer than one worker, or fewer GPUs than the workers' shares.
      log_parent: the folder that holds its log folder (the run directory, so the logs of
        a lost process outlive the run's temporary folder); default: the temporary folder.
    """

    def __init__(
        self,
        num_workers: int,
        threads_per_worker: int = 0,
        label: str = "Tuner",
        gpus_per_worker: int = 0,
        log_parent: Optional[str] = None,
    ) -> None:
        if num_workers < 1:
            raise PipelineError(
                f"A local worker pool needs at least one worker, not {num_workers}; pass "
                "--direct_num_workers=N with N >= 1."
            )
        self.num_workers = num_workers
        self.threads_per_worker = threads_per_worker
        self.label = label
        gpus = host_gpus()
        check_gpus_per_trial(gpus_per_worker, num_workers, gpus)
        self._gpus = [worker_gpus(i, gpus_per_worker, gpus) for i in range(num_workers)]
        self._log_dir = tempfile.mkdtemp(
            prefix=f"beam_pipeline_{label.lower()}_workers_", dir=log_parent
        )
        self._children: list[_Child] = []
        self._dispatcher: Optional[_Dispatcher] = None
        self._filter = _DropWorkerCountWarning()
        self.restarts = 0

    def start(self) -> LocalWorkerPool:
        """Starts the processes (they get ready in the background); returns self."""
        if not self._children:
            self._children = [
                _Child(i, self.threads_per_worker, self._log_dir, self.label, self._gpus[i])
                for i in range(self.num_workers)
            ]
            self._dispatcher = _Dispatcher(self)
            from apache_beam.runners.portability.fn_api_runner import fn_runner

            logging.getLogger(fn_runner.__name__).addFilter(self._filter)
        return self

    def wait_ready(self) -> None:
        """Blocks until every process serves (its imports are done).

        Raises:
          PipelineError: a process exited while starting.
        """
        for child in self._children:
            child.wait_ready()

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self._children]

    @property
    def log_dir(self) -> str:
        return self._log_dir

    def lost_workers(self) -> list[int]:
        """Indexes of processes that exited."""
        return [c.index for c in self._children if not c.alive]

    def exit_code(self, index: int) -> Optional[int]:
        """How process ``index`` ended: its exit code, minus the signal that killed it, or
        None while it runs."""
        return self._children[index].process.exitcode

    def restart(self) -> None:
        """Replaces every process (after one exited: a survivor may still run its trial)."""
        for i in range(len(self._children)):
            self._replace(i)
        self.restarts += 1

    def restart_worker(self, index: int) -> None:
        """Replaces process ``index`` (after it exited); the others go on with their work."""
        self._replace(index)
        self.restarts += 1

    def _replace(self, index: int, kill: bool = False) -> None:
        """Stops process ``index`` (``kill``: at once) and starts a fresh one in its place."""
        self._children[index].close(kill=kill)
        self._children[index] = _Child(
            index, self.threads_per_worker, self._log_dir, self.label, self._gpus[index]
        )

    def stop_jobs(self, indexes: Sequence[int]) -> None:
        """Kills processes ``indexes`` mid-job and puts fresh ones in their place.

        For jobs a stopped search abandons: a trial left running there would go on writing
        into the tuner's staging folder while the stage deletes it (a rolling search that
        stops on its third failure while the other slot still trains; the delete then
        failed with "directory not empty" on top of the error the user must read). The
        abandoned jobs' channel threads end quietly (:func:`_quiet_abandoned_jobs`). Not
        counted in :attr:`restarts` (no process was lost).
        """
        with _quiet_abandoned_jobs():
            for index in indexes:
                self._replace(index, kill=True)
            _join_channel_threads()

    def pipeline(self, options: PipelineOptions, worker: Optional[int] = None) -> beam.Pipeline:
        """A pipeline whose workers are this pool's processes (one Beam worker each).

        Args:
          options: the job's options (the runner is replaced).
          worker: run the whole job on process ``worker`` only (one Beam worker), so
            that jobs running at the same time each get their own process.
        """
        from apache_beam.runners.portability.fn_api_runner import fn_runner
        from apache_beam.transforms import environments

        if self._dispatcher is None:
            self.start()
        assert self._dispatcher is not None
        if worker is None:
            endpoint, workers = self._dispatcher.endpoint, self.num_workers
        else:
            endpoint, workers = self._children[worker].wait_ready(), 1
        settings = options.get_all_options(drop_default=True)
        settings.update(direct_running_mode="in_memory", direct_num_workers=workers)
        runner = fn_runner.FnApiRunner(
            default_environment=environments.ExternalEnvironment(endpoint)
        )
        return beam.Pipeline(runner=runner, options=new_options(**settings))

    def close(self) -> None:
        """Stops the processes; their logs are deleted unless one of them exited early."""
        from apache_beam.runners.portability.fn_api_runner import fn_runner

        logging.getLogger(fn_runner.__name__).removeFilter(self._filter)
        lost = self.lost_workers() or self.restarts
        with _quiet_abandoned_jobs():
            for child in self._children:
                child.close()
            _join_channel_threads()
        self._children = []
        if self._dispatcher is not None:
            self._dispatcher.stop()
            self._dispatcher = None
        if not lost:
            import shutil

            shutil.rmtree(self._log_dir, ignore_errors=True)

    def __enter__(self) -> LocalWorkerPool:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.close()


def local_pool_size(options: PipelineOptions, parallel: int) -> int:
    """Worker processes for a pool: 0 (no pool) unless the DirectRunner.

    ``multi_processing`` mode: ``--direct_num_workers`` processes (0: one per core), never
    more than ``parallel``, the work items that run at once (the tuner's parallel trials).
    ``in_memory`` mode: one process, so the trials still run one at a time as that mode
    runs everything, but not in the launcher: a trial is the user's code, and an exit
    call or a crash in it must end a pool process (replaced), not the run.
    """
    direct = options.view_as(po.DirectOptions)
    if not is_direct(options):
        return 0
    if direct.direct_running_mode != "multi_processing":
        return 1
    workers = direct.direct_num_workers or os.cpu_count() or 1
    return max(1, min(workers, parallel))
