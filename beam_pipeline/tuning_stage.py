"""The Tuner stage: the module's ``tuner_fn`` drives a keras-tuner oracle; trials run on workers.

The oracle lives on the launcher (:class:`trainer.tuning.OracleDriver`): it is asked for
trials, they run as Beam jobs (:class:`transforms.tuning.RunTrials`: a trial per element,
with the ``--tuner_accelerator`` / ``--tuner_min_ram`` resource hints), their results are
reported and its state saved, until it stops or ``--tuner_max_trials`` is reached. Two
schedules (``--tuner_schedule``):

- rolling (default): ``--tuner_parallel_trials`` slots, each running one trial's job at a
  time; a slot that frees reports its trial and gets the next one at once, so no worker
  waits for another's slower trial;
- rounds: ask a trial per slot, run them as one job (Reshuffled to workers), wait for all,
  report, repeat; an adaptive oracle then sees the same results at the same points on a
  rerun.

There is no long-lived oracle server: a worker lost mid-trial is retried by the runner,
and a trial's result file makes the retry idempotent.

On the DirectRunner in ``multi_processing`` mode, the jobs run on a
:class:`LocalWorkerPool`: worker processes started once per search, with TensorFlow and
keras-tuner imported and their thread pools sized to share the cores, serving every job
as Beam EXTERNAL workers (a rolling slot's jobs on its own process). Beam's own
multi-processing mode starts fresh worker processes for every job, which would cost each
trial seconds of imports; the stage also replaces a pool process that died and reruns its
trial (the FnApiRunner would wait for it forever). In ``in_memory`` mode the trials run
one after another in the launching process. On other runners (Dataflow, Flink, Spark)
each trial (rolling) or round is one job of that runner.

Without a ``tuner_fn``, a :class:`trainer.tuning.SearchSpace` from the pipeline config
tunes the module's :class:`trainer.TrainSpec` the same way.

Artifact ``<run_dir>/tuner/`` (published atomically):

- ``best_hyperparameters.json``: the best completed trial's ``HyperParameters`` config
  (``keras_tuner.HyperParameters.from_config`` reads it; the trainer gets its path);
- ``trials.json`` / ``trials.csv``: per trial its hyperparameters, objective, status,
  start time, seconds, attempts, round, worker (host:pid) and error;
- ``objective.png``: the objective per trial and the best so far;
- ``<project_name>/``: keras-tuner's project: ``oracle.json`` (oracle state), per trial
  ``trial.json``, its checkpoint and ``beam_result-<attempt>.json``;
- ``workers/``: each worker process's ``fn_args.working_dir``.

Example::

    report, best = run_tuning_stage(config, run_dir, options)
    print(report.note)    # 4 trials (4 completed, 0 failed) 2 at a time (rolling) on ...
    run_training_stage(config, run_dir, options, hyperparameters_path=best)
"""

from __future__ import annotations

import collections
import contextlib
import copy
import csv
import dataclasses
import io
import json
import logging
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options import pipeline_options as po
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.utils import shared

from beam_pipeline.beam_options import create_pipeline, is_direct, run_pipeline
from beam_pipeline.config import PipelineConfig, TunerSchedule, parse_custom_config
from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.module_staging import StagedModule
from beam_pipeline.core.types import Artifact
from beam_pipeline.run_dir import RunDirectory
from beam_pipeline.summary import StageReport, StageStatus
from trainer.module_loader import load_trainer_module
from trainer.tuning import (
    OracleDriver,
    SearchSpace,
    TrialRecord,
    TrialResult,
    TrialSpec,
    TrialStatus,
    TuningJob,
    load_tuner,
    read_trial_result,
)
from transforms.metrics import NAMESPACE
from transforms.tuning import RunTrials

__all__ = [
    "STAGE",
    "BEST_HYPERPARAMETERS_FILE",
    "TRIALS_JSON",
    "TRIALS_CSV",
    "OBJECTIVE_PLOT",
    "LocalWorkerPool",
    "build_tuning_job",
    "local_pool_size",
    "run_tuning_stage",
]

STAGE = "Tuner"
BEST_HYPERPARAMETERS_FILE = "best_hyperparameters.json"
TRIALS_JSON = "trials.json"
TRIALS_CSV = "trials.csv"
OBJECTIVE_PLOT = "objective.png"
_HEAD_ROWS = 5
_ROUND_ATTEMPTS = 3  # a round is rerun at most twice after losing a worker process
_LOG = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- worker pool


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


def _serve_pool_worker(threads: int) -> None:
    """One warm worker process: caps TF's threads, imports the ML stack, serves SDK harnesses.

    Runs until its standard input closes (the launcher exited or closed the pool).
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer

    from trainer.process import limit_threads, prewarm

    limit_threads(threads)
    prewarm()
    import transforms.tuning  # noqa: F401  what the round's DoFn unpickles

    address, server = BeamFnExternalWorkerPoolServicer.start(use_process=False, port=0)
    sys.stdout.write(address + "\n")
    sys.stdout.flush()
    # From now on the launcher no longer reads our standard output: what trials print
    # (Keras progress bars...) goes to the log with stderr, or a full pipe would block us.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdin.read()
    server.stop(0)


class _Child:
    """One pool process: its Popen, log file and (once ready) its worker-pool address."""

    def __init__(self, index: int, threads: int, log_dir: str) -> None:
        self.index = index
        self.log_path = os.path.join(log_dir, f"worker-{index}.log")
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH")) if p)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        code = (
            "from beam_pipeline.tuning_stage import _serve_pool_worker; "
            f"_serve_pool_worker({threads})"
        )
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.address: Optional[str] = None
        self._lock = threading.Lock()

    def wait_ready(self) -> str:
        with self._lock:
            return self._read_address()

    def _read_address(self) -> str:
        if self.address is None:
            line = self.process.stdout.readline().strip() if self.process.stdout else ""
            if not line:
                raise PipelineError(
                    f"Tuner worker process {self.index} exited before it was ready; see "
                    f"{self.log_path} for why (out of memory, or an import error)."
                )
            self.address = line
        return self.address

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


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

    Each process imports TensorFlow and keras-tuner once, with TensorFlow's thread pools
    capped to ``threads_per_worker``; every job created with :meth:`pipeline` runs its
    bundles there (one Beam worker per process) through Beam's EXTERNAL environment, so
    a search's rounds pay no process start-up. Start it early to hide its start-up
    behind other work.

    Example::

        with LocalWorkerPool(2, threads_per_worker=1) as pool:
            with pool.pipeline(options) as p:
                p | RunTrials(job, specs)

    Args:
      num_workers: worker processes.
      threads_per_worker: TensorFlow intra-op threads of each (0: TensorFlow's default).
    """

    def __init__(self, num_workers: int, threads_per_worker: int = 0) -> None:
        if num_workers < 1:
            raise PipelineError(
                f"A local worker pool needs at least one worker, not {num_workers}; pass "
                "--direct_num_workers=N with N >= 1."
            )
        self.num_workers = num_workers
        self.threads_per_worker = threads_per_worker
        self._log_dir = tempfile.mkdtemp(prefix="beam_pipeline_tuner_workers_")
        self._children: list[_Child] = []
        self._dispatcher: Optional[_Dispatcher] = None
        self._filter = _DropWorkerCountWarning()
        self.restarts = 0

    def start(self) -> LocalWorkerPool:
        """Starts the processes (they get ready in the background); returns self."""
        if not self._children:
            self._children = [
                _Child(i, self.threads_per_worker, self._log_dir) for i in range(self.num_workers)
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
        return [c.process.pid for c in self._children]

    @property
    def log_dir(self) -> str:
        return self._log_dir

    def lost_workers(self) -> list[int]:
        """Indexes of processes that exited."""
        return [c.index for c in self._children if not c.alive]

    def restart(self) -> None:
        """Replaces every process (after one exited: a survivor may still run its trial)."""
        for i, child in enumerate(self._children):
            child.close()
            self._children[i] = _Child(i, self.threads_per_worker, self._log_dir)
        self.restarts += 1

    def restart_worker(self, index: int) -> None:
        """Replaces process ``index`` (after it exited); the others go on with their work."""
        self._children[index].close()
        self._children[index] = _Child(index, self.threads_per_worker, self._log_dir)
        self.restarts += 1

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
        return beam.Pipeline(runner=runner, options=PipelineOptions([], **settings))

    def close(self) -> None:
        """Stops the processes; their logs are deleted unless one of them exited early."""
        from apache_beam.runners.portability.fn_api_runner import fn_runner

        logging.getLogger(fn_runner.__name__).removeFilter(self._filter)
        lost = self.lost_workers() or self.restarts
        with _quiet_abandoned_jobs():
            for child in self._children:
                child.close()
            # A job abandoned on these processes fails in its channel threads now.
            deadline = time.time() + _CHANNEL_GRACE_S
            for thread in threading.enumerate():
                if thread.name in _CHANNEL_THREADS:
                    thread.join(timeout=max(0.0, deadline - time.time()))
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


def local_pool_size(options: PipelineOptions, parallel_trials: int) -> int:
    """Worker processes for the tuner's trials: 0 (no pool) unless DirectRunner multi-processing.

    ``--direct_num_workers`` processes (0: one per core), never more than trials at once.
    """
    direct = options.view_as(po.DirectOptions)
    if not is_direct(options) or direct.direct_running_mode != "multi_processing":
        return 0
    workers = direct.direct_num_workers or os.cpu_count() or 1
    return max(1, min(workers, parallel_trials))


# ----------------------------------------------------------------------------- the stage


def build_tuning_job(
    config: PipelineConfig,
    run_dir: RunDirectory,
    module_file: str,
    tuner_dir: str,
    threads_per_trial: int = 0,
    *,
    search_space: Optional[SearchSpace] = None,
    staged: Optional[StagedModule] = None,
) -> TuningJob:
    """The tuning job of a run, with every input checked on the launching machine.

    Args:
      config: the run's configuration (``config.tuner``, ``config.trainer.custom_config``).
      run_dir: the run directory holding the Transform stage's artifacts.
      module_file: the module file with ``tuner_fn``.
      tuner_dir: the shared tuner folder (the tuner artifact's staging folder).
      threads_per_trial: TensorFlow intra-op threads per trial process (0: default).
      search_space: a config-declared search space (for a TrainSpec module).
      staged: the module file and its folder as staged in the run directory, which the
        workers load (None: they load ``module_file`` itself).

    Raises:
      PipelineError: a missing artifact, bad step counts, or bad --custom_config.
    """
    tuner = config.tuner
    if tuner.train_steps < 1 or tuner.eval_steps < 1:
        raise PipelineError(
            f"--tuner_train_steps={tuner.train_steps} / --tuner_eval_steps={tuner.eval_steps} "
            "are out of range; pass values of at least 1."
        )
    inputs = run_dir.model_inputs("tuner")
    custom_config = parse_custom_config(config.trainer.custom_config)
    with fileio.open(staged.path if staged else module_file) as f:
        module_source = f.read()
    return TuningJob(
        module_file=module_file,
        module_source=module_source,
        **inputs,
        tuner_dir=tuner_dir,
        train_steps=tuner.train_steps,
        eval_steps=tuner.eval_steps,
        custom_config=custom_config,
        threads_per_trial=threads_per_trial,
        search_space=search_space,
        entry_point=config.trainer.entry_point,
        staged=staged,
    )


def _counters(result) -> dict[str, int]:
    try:
        query = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    except (AttributeError, NotImplementedError, KeyError):  # runners without metrics
        return {}
    return {c.key.metric.name: int(c.committed or 0) for c in query["counters"]}


def _run_round(
    job: TuningJob,
    specs: Sequence[TrialSpec],
    config: PipelineConfig,
    options: PipelineOptions,
    pool: Optional[LocalWorkerPool],
    runners: shared.Shared,
) -> dict[str, int]:
    """Runs one round's Beam job; returns its counters. Reruns it after a lost pool worker."""
    hints = config.tuner

    def trials() -> RunTrials:  # a transform is applied to one pipeline only: one per attempt
        return RunTrials(
            job, specs, accelerator=hints.accelerator, min_ram=hints.min_ram, runners=runners
        )

    if pool is None:
        p = create_pipeline(options)
        _ = p | "RunTrials" >> trials()
        result = run_pipeline(p, f"Tuner round {specs[0].round}", config.worker_start_timeout)
        result.wait_until_finish()
        return _counters(result)
    for _ in range(_ROUND_ATTEMPTS):
        pool.wait_ready()  # a process that could not start says why (its log) here
        outcome: dict[str, Any] = {}
        p = pool.pipeline(options)  # in this thread: see _job_options on options and threads
        _ = p | "RunTrials" >> trials()

        def run(outcome=outcome, p=p) -> None:
            try:
                result = p.run()
                result.wait_until_finish()
                outcome["counters"] = _counters(result)
            except BaseException as e:  # noqa: BLE001  handed to the launcher's thread
                outcome["error"] = e

        # The FnApiRunner waits forever for a worker process that died, so the job runs in
        # a thread while this one watches the pool (an abandoned job's thread is a daemon).
        thread = threading.Thread(target=run, name=f"tuner-round-{specs[0].round}", daemon=True)
        thread.start()
        while thread.is_alive() and not pool.lost_workers():
            thread.join(timeout=0.5)
        if not thread.is_alive():
            if "error" in outcome:
                raise outcome["error"]
            return outcome["counters"]
        lost = pool.lost_workers()
        pool.restart()
        _LOG.warning(
            "Tuner worker process(es) %s exited during round %d (logs in %s); restarted the "
            "pool and rerunning the round (finished trials are not rerun).",
            lost,
            specs[0].round,
            pool.log_dir,
        )
    raise PipelineError(
        f"Tuner worker processes kept exiting during round {specs[0].round} (see the logs in "
        f"{pool.log_dir}); a trial probably runs out of memory: shrink the model or pass "
        "--direct_num_workers=1."
    )


def _format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _format_hps(values: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={_format_value(v)}" for k, v in values.items()) or "(none)"


def _ranked(records: Sequence[TrialRecord], direction: str) -> list[TrialRecord]:
    done = [r for r in records if r.objective is not None and not math.isnan(r.objective)]
    done.sort(key=lambda r: r.objective, reverse=direction == "max")
    return done + [r for r in records if r not in done]


def _table_head(records: Sequence[TrialRecord], objective: str, direction: str) -> str:
    head = ("trial", "status", objective, "hyperparameters", "seconds", "worker")
    rows = [head] + [
        (
            r.trial_id,
            r.status.value,
            "-" if r.objective is None else f"{r.objective:.4g}",
            _format_hps(r.hyperparameters),
            f"{r.seconds:.1f}",
            r.worker or "-",
        )
        for r in _ranked(records, direction)[:_HEAD_ROWS]
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def _write_text(path: str, text: str) -> None:
    with fileio.open(path, "w") as f:
        f.write(text)


def _write_trials(folder: str, records: Sequence[TrialRecord], objective: str, direction: str):
    rows = [r.to_dict() for r in records]
    _write_text(
        os.path.join(folder, TRIALS_JSON),
        json.dumps(
            {"objective": {"name": objective, "direction": direction}, "trials": rows},
            indent=2,
            default=str,
        ),
    )
    hp_names = sorted({k for r in records for k in r.hyperparameters})
    metric_names = sorted({k for r in records for k in r.metrics})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        ["trial_id", "status", "objective", *hp_names, *metric_names]
        + ["started", "seconds", "attempts", "round", "worker", "error"]
    )
    for r in records:
        writer.writerow(
            [r.trial_id, r.status.value, "" if r.objective is None else r.objective]
            + [r.hyperparameters.get(k, "") for k in hp_names]
            + [r.metrics.get(k, "") for k in metric_names]
            + [r.started, r.seconds, r.attempts, r.round, r.worker, r.error or ""]
        )
    _write_text(os.path.join(folder, TRIALS_CSV), out.getvalue())


def _plot_objective(path: str, records: Sequence[TrialRecord], objective: str, direction: str):
    """Objective per trial (start order), failed trials marked, and the best so far."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    xs = [i for i, r in enumerate(records) if r.objective is not None]
    ys = [records[i].objective for i in xs]
    best, best_line = None, []
    for y in ys:
        better = best is None or (y > best if direction == "max" else y < best)
        best = y if better else best
        best_line.append(best)
    axes.plot(xs, ys, "o", label="completed trial")
    if xs:
        axes.step(xs, best_line, where="post", label="best so far")
    failed = [i for i, r in enumerate(records) if r.status is not TrialStatus.COMPLETED]
    if failed:
        low = min(ys) if ys else 0.0
        axes.plot(failed, [low] * len(failed), "x", color="red", label="failed trial")
    axes.set_xticks(range(len(records)), [r.trial_id for r in records])
    axes.set_xlabel("trial")
    axes.set_ylabel(f"{objective} ({direction})")
    axes.legend()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    with fileio.open(path, "wb") as f:
        f.write(buffer.getvalue())


def _gather(specs: Sequence[TrialSpec]) -> dict[str, TrialResult]:
    """The results the round's workers wrote, keyed by trial id (one per trial attempt)."""
    out = {}
    for spec in specs:
        result = read_trial_result(spec.project_dir, spec.trial_id, spec.attempt)
        if result is not None:
            out[spec.trial_id] = result
    return out


@dataclasses.dataclass
class _Search:
    """What a search did: the driven oracle, summed counters, and where the time went.

    ``round_seconds``: wall time of each synchronous round; ``trial_job_seconds``: per
    trial of a rolling search, from its job's start to its report to the oracle.
    """

    rounds: OracleDriver
    counters: dict[str, int]
    ran: bool
    setup_seconds: float
    schedule: TunerSchedule
    round_seconds: list[float] = dataclasses.field(default_factory=list)
    trial_job_seconds: dict[str, float] = dataclasses.field(default_factory=dict)


def _schedule(
    config: PipelineConfig, options: PipelineOptions, pool: Optional[LocalWorkerPool]
) -> TunerSchedule:
    """Rolling needs jobs that can run side by side: a pool's processes or a real runner.

    In the DirectRunner's in_memory mode every trial runs in the launching process, one at
    a time, so there is nothing to roll; a dry run builds the first round's graph only.
    """
    if options.view_as(po.TestOptions).dry_run:
        return TunerSchedule.ROUNDS
    if pool is None and is_direct(options):
        return TunerSchedule.ROUNDS
    return config.tuner.schedule


def _search(
    config: PipelineConfig,
    job: TuningJob,
    options: PipelineOptions,
    pool: Optional[LocalWorkerPool],
) -> _Search:
    """Runs the search: the launcher's tuner_fn, then rounds until the oracle stops."""
    started = time.time()
    schedule = _schedule(config, options, pool)
    runners = shared.Shared()  # workers keep their loaded tuner from job to job
    tuner = load_tuner(job, job.tuner_dir)
    # A rolling slot is a pool process; a round asks for --tuner_parallel_trials trials.
    rolling_on_pool = pool is not None and schedule is TunerSchedule.ROLLING
    slots = pool.num_workers if rolling_on_pool else config.tuner.parallel_trials
    rounds = OracleDriver(tuner.tuner, slots, config.tuner.max_trials, job.module_file)
    search = _Search(rounds, {}, True, round(time.time() - started, 3), schedule)
    if schedule is TunerSchedule.ROLLING:
        _roll(search, job, config, options, pool, runners)
        return search
    counters: collections.Counter = collections.Counter()
    dry_run = options.view_as(po.TestOptions).dry_run
    while True:
        started = time.time()
        specs = rounds.next_round()
        if not specs:
            search.counters = dict(counters)
            return search
        counters.update(_run_round(job, specs, config, options, pool, runners))
        if dry_run:
            search.ran = False
            return search
        results = _gather(specs)
        rounds.report(results)
        search.round_seconds.append(round(time.time() - started, 3))
        _LOG.info(
            "Tuner round %d: %d trial(s) in %.1f s: %s",
            specs[0].round,
            len(specs),
            search.round_seconds[-1],
            ", ".join(f"{r.trial_id}={r.status.value}" for r in results.values()),
        )


@dataclasses.dataclass(eq=False)
class _TrialJob:
    """One trial's job of a rolling search, running in its own thread."""

    slot: int
    spec: TrialSpec
    tries: int
    started: float
    result: Optional[beam.runners.runner.PipelineResult] = None  # once submitted


def _job_options(options: PipelineOptions, trial_id: str) -> PipelineOptions:
    """A copy of ``options`` for one trial's job; a given --job_name gets the trial as a suffix.

    Trial jobs run side by side, and Dataflow refuses two running jobs of the same name. A
    copy, because each job is built in a thread of its own and Beam's PipelineOptions are
    not thread-safe: ``view_as`` fills the shared option dict while ``beam.Pipeline``
    deep-copies it, and two trial jobs built at once from one options object have come
    out with the DirectRunner, running a portable-runner trial in the launcher. Call it
    from the thread that owns ``options``.
    """
    own = copy.deepcopy(options)  # as beam.Pipeline copies its options
    cloud = own.view_as(po.GoogleCloudOptions)
    if cloud.job_name:
        cloud.job_name = f"{cloud.job_name}-trial-{trial_id}".lower().replace("_", "-")
    return own


def _roll(
    search: _Search,
    job: TuningJob,
    config: PipelineConfig,
    options: PipelineOptions,
    pool: Optional[LocalWorkerPool],
    runners: shared.Shared,
) -> None:
    """The rolling schedule: every slot runs one trial's job; a freed slot asks for the next.

    Each trial is its own small Beam job (on a pool: on the slot's own process), run in a
    thread of this process; this thread alone talks to the oracle. The FnApiRunner waits
    forever for a pool process that died, so this thread also watches the pool: a lost
    process is replaced and its trial's job rerun (a finished trial's result file is
    reused, so nothing counts twice); the abandoned job's thread is a daemon.
    """
    hints = config.tuner
    done: queue.Queue = queue.Queue()
    running: dict[int, _TrialJob] = {}
    counters: collections.Counter = collections.Counter()

    def launch(slot: int, spec: TrialSpec, tries: int = 1) -> None:
        entry = _TrialJob(slot, spec, tries, time.time())
        running[slot] = entry
        own = _job_options(options, spec.trial_id)  # here: the job's thread must not read options

        def run() -> None:
            try:
                # On a pool this waits for the slot's process (a restarted one starts anew).
                p = pool.pipeline(own, worker=slot) if pool is not None else create_pipeline(own)
                _ = p | "RunTrials" >> RunTrials(
                    job,
                    [spec],
                    accelerator=hints.accelerator,
                    min_ram=hints.min_ram,
                    runners=runners,
                )
                if pool is not None:
                    entry.result = p.run()
                else:  # the trial's own job on the runner, watched (beam_options.run_pipeline)
                    what = f"Tuner trial {spec.trial_id}"
                    entry.result = run_pipeline(p, what, config.worker_start_timeout)
                entry.result.wait_until_finish()
                done.put((entry, _counters(entry.result), None))
            except BaseException as e:  # noqa: BLE001  handed to the launcher's thread
                done.put((entry, None, e))

        name = f"tuner-trial-{spec.trial_id}-slot-{slot}"
        threading.Thread(target=run, name=name, daemon=True).start()

    try:
        _roll_until_done(search, pool, done, running, counters, launch)
    except BaseException:
        # The search stops here: the other trials' jobs must not run on (on Dataflow, a
        # submitted job would go on costing). Local pool jobs end with the pool.
        for entry in running.values():
            _cancel(entry)
        raise


def _cancel(entry: _TrialJob) -> None:
    if entry.result is None:
        return
    try:
        entry.result.cancel()
    except Exception as e:  # noqa: BLE001  runners without cancel (the FnApiRunner)
        _LOG.debug("Could not cancel trial %s's job: %s", entry.spec.trial_id, e)


def _roll_until_done(
    search: _Search,
    pool: Optional[LocalWorkerPool],
    done: queue.Queue,
    running: dict[int, _TrialJob],
    counters: collections.Counter,
    launch: Callable[..., None],
) -> None:
    """The rolling schedule's loop (see :func:`_roll`): ask, launch, wait, report.

    ``running`` maps a slot to its trial's job; ``launch(slot, spec, tries=1)`` starts a
    job and records it there; each job's thread puts ``(entry, counters, error)`` on
    ``done`` when it ends.
    """
    rounds = search.rounds
    slots = rounds.slots
    ask = True
    while True:
        if ask:
            free = [slot for slot in range(slots) if slot not in running]
            for slot, spec in zip(free, rounds.ask(len(free)) if free else []):
                launch(slot, spec)
            ask = False
        if not running:  # the oracle has nothing more to run and nothing runs
            search.counters = dict(counters)
            return
        try:
            entry, counts, error = done.get(timeout=0.5)
        except queue.Empty:
            for slot in pool.lost_workers() if pool is not None else []:
                pool.restart_worker(slot)
                lost = running.pop(slot, None)
                if lost is None:
                    continue
                if lost.tries >= _ROUND_ATTEMPTS:
                    raise PipelineError(
                        f"Tuner worker process {slot} kept exiting while it ran trial "
                        f"{lost.spec.trial_id} (see the logs in {pool.log_dir}); the trial "
                        "probably runs out of memory: shrink the model or pass "
                        "--direct_num_workers=1."
                    ) from None
                _LOG.warning(
                    "Tuner worker process %d exited during trial %s (log in %s); restarted "
                    "it and rerunning the trial.",
                    slot,
                    lost.spec.trial_id,
                    pool.log_dir,
                )
                launch(slot, lost.spec, lost.tries + 1)
            continue
        if running.get(entry.slot) is not entry:  # an abandoned job (its process was lost)
            continue
        del running[entry.slot]
        if error is not None:
            raise error
        counters.update(counts)
        results = _gather([entry.spec])
        rounds.report(results, [entry.spec])
        seconds = round(time.time() - entry.started, 3)
        search.trial_job_seconds[entry.spec.trial_id] = seconds
        ask = True
        _LOG.info(
            "Tuner trial %s: %s in %.1f s on slot %d",
            entry.spec.trial_id,
            ", ".join(r.status.value for r in results.values()) or "no result",
            seconds,
            entry.slot,
        )


def _cached_report(run_dir: RunDirectory, started: float) -> tuple[StageReport, Optional[str]]:
    best = run_dir.path(Artifact.TUNER, BEST_HYPERPARAMETERS_FILE)
    exists = fileio.exists(best)
    return (
        StageReport(
            STAGE,
            StageStatus.CACHED,
            seconds=round(time.time() - started, 3),
            artifact=run_dir.path(Artifact.TUNER),
            note="already tuned in this run directory" + (f"; best: {best}" if exists else ""),
        ),
        best if exists else None,
    )


def _module_has_tuner_fn(
    module_file: str, entry_point: Optional[str], staged: Optional[StagedModule]
) -> bool:
    module = load_trainer_module(module_file, entry_point=entry_point, staged=staged).module
    return callable(getattr(module, "tuner_fn", None))


def run_tuning_stage(
    config: PipelineConfig,
    run_dir: RunDirectory,
    options: PipelineOptions,
    module_file: Optional[str] = None,
    *,
    worker_pool: Optional[LocalWorkerPool] = None,
    search_space: Optional[SearchSpace] = None,
    staged: Optional[StagedModule] = None,
) -> tuple[StageReport, Optional[str]]:
    """Tunes the module's model with its ``tuner_fn``; trials run as Beam work, in rounds.

    Args:
      config: the run's configuration (``config.tuner``).
      run_dir: the run directory with the Transform stage's artifacts.
      options: Beam pipeline options (each round is one job on this runner).
      module_file: the module file (default: ``config.module_file``).
      worker_pool: a started :class:`LocalWorkerPool` to run the rounds on (the caller
        closes it); by default one is made for the DirectRunner in multi_processing mode.
      search_space: a search space from the pipeline config: the module's TrainSpec is
        tuned without a ``tuner_fn`` (see :class:`trainer.tuning.SearchSpace`).
      staged: the module file and its folder as staged in the run directory (see
        :func:`beam_pipeline.core.module_staging.stage_module_file`), which the trials load.

    Returns:
      (the StageReport, the path of ``best_hyperparameters.json`` or None). The report is
      OK (tuned), CACHED (already published here) or SKIPPED (disabled, no module file,
      no ``tuner_fn``, or a dry run).

    Raises:
      PipelineError: bad flags or inputs, a ``tuner_fn`` or model error that stops the
        search, keras-tuner's consecutive-failure limit, or no trial completing.
    """
    started = time.time()
    module_file = module_file or config.module_file
    if not config.tuner.enabled:
        return StageReport(STAGE, StageStatus.SKIPPED, note="tuning is disabled"), None
    if not module_file:
        return StageReport(STAGE, StageStatus.SKIPPED, note="no module file, nothing to tune"), None
    if run_dir.is_published(Artifact.TUNER):
        return _cached_report(run_dir, started)
    if search_space is None and not _module_has_tuner_fn(
        module_file, config.trainer.entry_point, staged
    ):
        return (
            StageReport(STAGE, StageStatus.SKIPPED, note=f"{module_file} defines no tuner_fn"),
            None,
        )
    parallel = config.tuner.parallel_trials
    if parallel < 1 or (config.tuner.max_trials is not None and config.tuner.max_trials < 1):
        raise PipelineError(
            f"--tuner_parallel_trials={parallel} / --tuner_max_trials="
            f"{config.tuner.max_trials} are out of range; pass values of at least 1."
        )
    staging = run_dir.new_staging(Artifact.TUNER)
    try:
        with contextlib.ExitStack() as stack:
            pool = worker_pool
            size = local_pool_size(options, parallel) if pool is None else 0
            if size:
                threads = max(1, (os.cpu_count() or 1) // size)
                pool = stack.enter_context(LocalWorkerPool(size, threads_per_worker=threads))
            threads = pool.threads_per_worker if pool is not None else 0
            job = build_tuning_job(
                config,
                run_dir,
                module_file,
                staging,
                threads,
                search_space=search_space,
                staged=staged,
            )
            search = _search(config, job, options, pool)
            workers = pool.num_workers if pool is not None else None
            restarts = pool.restarts if pool is not None else 0
    except BaseException:
        run_dir.discard(staging)
        raise
    if not search.ran:
        run_dir.discard(staging)
        return StageReport(STAGE, StageStatus.SKIPPED, note="dry run: job graph built only"), None

    rounds = search.rounds
    records = rounds.records()
    objective, direction = rounds.objective
    best = rounds.best_hyperparameters()
    if best is None:
        run_dir.discard(staging)
        raise PipelineError(
            f"None of the {len(records)} tuning trials completed (last error: "
            f"{rounds.last_error()}); fix the model or the search space in {module_file}."
        )
    try:
        _write_text(os.path.join(staging, BEST_HYPERPARAMETERS_FILE), json.dumps(best, indent=2))
        _write_trials(staging, records, objective, direction)
        _plot_objective(os.path.join(staging, OBJECTIVE_PLOT), records, objective, direction)
    except BaseException:
        run_dir.discard(staging)
        raise
    artifact = run_dir.publish(Artifact.TUNER, staging)
    best_path = os.path.join(artifact, BEST_HYPERPARAMETERS_FILE)
    report = _report(records, search, best, artifact, workers, restarts, started)
    return report, best_path


def _report(
    records: Sequence[TrialRecord],
    search: _Search,
    best: Mapping[str, Any],
    artifact: str,
    pool_workers: Optional[int],
    restarts: int,
    started: float,
) -> StageReport:
    rounds = search.rounds
    objective, direction = rounds.objective
    best_id = rounds.best_trial_id()
    top = next(r for r in records if r.trial_id == best_id)
    done = sum(r.status is TrialStatus.COMPLETED for r in records)
    workers = sorted({r.worker for r in records if r.worker})
    best_values = dict(best.get("values", {}))
    if search.schedule is TunerSchedule.ROLLING:
        how = f"{rounds.slots} at a time (rolling)"
    else:
        how = f"in {rounds.rounds} rounds"
    note = (
        f"{len(records)} trials ({done} completed, {len(records) - done} failed) {how} "
        f"on {len(workers)} worker process(es); best {objective}="
        f"{top.objective:.4g} (trial {top.trial_id}): {_format_hps(best_values)}; "
        f"table: {os.path.join(artifact, TRIALS_CSV)}"
    )
    return StageReport(
        stage=STAGE,
        status=StageStatus.OK,
        seconds=round(time.time() - started, 3),
        artifact=artifact,
        note=note,
        details={
            "best_hyperparameters": best_values,
            "best_trial": top.trial_id,
            "objective": {"name": objective, "direction": direction, "value": top.objective},
            "trials": len(records),
            "completed": done,
            "failed": len(records) - done,
            "schedule": search.schedule.value,
            "rounds": rounds.rounds,
            "workers": workers,
            "local_pool_workers": pool_workers,
            "worker_restarts": restarts,
            "table_head": _table_head(records, objective, direction),
            "counters": dict(search.counters),
            "setup_seconds": search.setup_seconds,
            "round_seconds": list(search.round_seconds),
            "trial_job_seconds": dict(search.trial_job_seconds),
        },
    )
