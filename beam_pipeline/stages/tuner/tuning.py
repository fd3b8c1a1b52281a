"""The Tuner stage: the module's ``tuner_fn`` drives a keras-tuner oracle; trials run on workers.

The oracle lives on the launcher (:class:`trainer.tuning.OracleDriver`): it is asked for
trials, they run as Beam jobs (:class:`transforms.tuner.RunTrials`: a trial per element,
with the ``--tuner_accelerator`` / ``--tuner_min_ram`` resource hints), their results are
reported and its state saved, until it stops or ``--tuner_max_trials`` is reached. Three
schedules (``--tuner_schedule``, :mod:`beam_pipeline.stages.tuner`):

- rolling (the DirectRunner's default): ``--tuner_parallel_trials`` slots, each running
  one trial's job at a time; a slot that frees reports its trial and gets the next one at
  once, so no worker waits for another's slower trial;
- rounds: ask a trial per slot, run them as one job (Reshuffled to workers), wait for all,
  report, repeat; an adaptive oracle then sees the same results at the same points on a
  rerun;
- search_job (the default of runners whose jobs start workers, :func:`default_schedule`):
  ONE job for the whole search (:mod:`beam_pipeline.stages.tuner.search_job`): a
  long-lived loop per slot on its own worker claims the next trial by a compare-and-swap
  on the oracle's state in the run's storage, runs and reports it; the workers, not the
  launcher, drive the oracle, and a lost worker's trial is re-issued when its lease ends.

There is no long-lived oracle server: a worker lost mid-trial is retried by the runner,
and a trial's result file makes the retry idempotent.

On the DirectRunner in ``multi_processing`` mode, the jobs run on a
:class:`~beam_pipeline.runtime.pool.LocalWorkerPool`: worker processes started once per
search, with TensorFlow and keras-tuner imported and their thread pools sized to share the
cores, serving every job as Beam EXTERNAL workers (a rolling slot's jobs on its own
process). Beam's own multi-processing mode starts fresh worker processes for every job,
which would cost each trial seconds of imports; the schedules also replace a pool process
that died and rerun its trial (the FnApiRunner would wait for it forever). In
``in_memory`` mode the trials run one after another on a pool of one process (never in
the launcher: a trial is the user's code). On other
runners (Dataflow, Flink, Spark) the whole search is one job of that runner by default
(search_job), or each trial (rolling) or round is one when asked for.

Without a ``tuner_fn``, a :class:`trainer.tuning.SearchSpace` from the pipeline config
tunes the module's :class:`trainer.TrainSpec` the same way.

Artifact ``<run_dir>/tuner/`` (published atomically):

- ``best_hyperparameters.json``: the best completed trial's ``HyperParameters`` config
  (``keras_tuner.HyperParameters.from_config`` reads it; the trainer gets its path);
- ``trials.json``, ``trials.csv``, ``objective.svg``: the trials (see
  :mod:`beam_pipeline.stages.tuner.trials`);
- ``<project_name>/``: keras-tuner's project: ``oracle.json`` (oracle state), per trial
  ``trial.json``, its checkpoint and ``beam_result-<attempt>.json``;
- ``workers/``: each worker process's ``fn_args.working_dir``.

Example::

    report, best = run_tuning_stage(config, run_dir, options)
    print(report.note)    # 4 trials (4 completed, 0 failed) 2 at a time (rolling) on ...
    run_training_stage(config, run_dir, options, hyperparameters_path=best)
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Optional

from apache_beam.options import pipeline_options as po
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.utils import shared

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.gpus import hide_gpus
from beam_pipeline.core.module_staging import StagedModule
from beam_pipeline.core.types import Artifact
from beam_pipeline.engine.artifacts import ModelInputs
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.engine.run_dir import RunDirectory
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.runtime.options import is_direct
from beam_pipeline.runtime.pool import LocalWorkerPool, local_pool_size
from beam_pipeline.stages.common.model_job import model_job_fields
from beam_pipeline.stages.tuner.rolling import TIMED_OUT, run_rolling
from beam_pipeline.stages.tuner.rounds import run_rounds
from beam_pipeline.stages.tuner.schedule import default_schedule, with_schedule
from beam_pipeline.stages.tuner.search import Search, TrialJobs
from beam_pipeline.stages.tuner.search_job import run_search_job
from beam_pipeline.stages.tuner.settings import TunerSchedule
from beam_pipeline.stages.tuner.trials import (
    OBJECTIVE_PLOT,
    STAGE,
    plot_objective,
    stage_report,
    write_text,
    write_trials,
)
from trainer.isolation import ProcessHost
from trainer.module_loader import load_trainer_module
from trainer.tuning import OracleDriver, SearchSpace, TuningJob, load_tuner
from trainer.tuning.early_stopping import check_rungs, start_rungs

__all__ = [
    "STAGE",
    "BEST_HYPERPARAMETERS_FILE",
    "build_tuning_job",
    "default_schedule",
    "run_tuning_stage",
    "with_schedule",
]

BEST_HYPERPARAMETERS_FILE = "best_hyperparameters.json"


def build_tuning_job(
    config: PipelineConfig,
    run_dir: RunDirectory,
    module_file: str,
    tuner_dir: str,
    threads_per_trial: int = 0,
    *,
    search_space: Optional[SearchSpace] = None,
    staged: Optional[StagedModule] = None,
    inputs: Optional[ModelInputs] = None,
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
      inputs: the Transform stage's outputs and the schema (default: those published in
        ``run_dir``).

    Raises:
      PipelineError: a missing artifact, bad step counts, or bad --custom_config.
    """
    tuner = config.tuner  # its step counts' ranges: checked once, by TunerConfig
    fields = model_job_fields(  # the trials run the Trainer's module (TunerStage.reads)
        run_dir,
        "tuner",
        module_file,
        custom_config=config.trainer.custom_config,
        mixed_precision=config.trainer.mixed_precision,
        entry_point=config.trainer.entry_point,
        staged=staged,
        inputs=inputs,
    )
    return TuningJob(
        **fields,
        tuner_dir=tuner_dir,
        train_steps=tuner.train_steps,
        eval_steps=tuner.eval_steps,
        threads_per_trial=threads_per_trial,
        search_space=search_space,
        early_stopping=tuner.early_stopping_rule,
    )


def _schedule(
    config: PipelineConfig, options: PipelineOptions, pool: Optional[LocalWorkerPool]
) -> TunerSchedule:
    """Rolling needs jobs that can run side by side: a pool's processes or a real runner.

    Without a pool on the DirectRunner (a caller's choice: the stage makes one) the trials
    run in the launching process, one at a time, so there is nothing to roll; a dry run
    builds the first round's graph only.
    """
    schedule = with_schedule(config, options).tuner.schedule
    if options.view_as(po.TestOptions).dry_run:
        # The search job's graph is the whole search; the others: the first round's.
        if schedule is TunerSchedule.SEARCH_JOB:
            return TunerSchedule.SEARCH_JOB
        return TunerSchedule.ROUNDS
    if pool is None and is_direct(options):
        return TunerSchedule.ROUNDS
    return schedule


def _make_driver(job: TuningJob, slots: int, max_trials: Optional[int], doing=None) -> OracleDriver:
    """The search's oracle driver: ``tuner_fn`` (and the hypermodel's ``build``, which
    keras-tuner calls to learn the search space) run here, in the oracle's own process.

    That process trains nothing (the trials run in workers), so its TensorFlow is kept off
    the GPUs: the build would otherwise initialize every visible one. (The launcher hides
    its own, but this process is a fork of the fork server, which did not.)
    """
    hide_gpus("the tuner's oracle builds the model only to learn its search space")
    if doing is not None:
        what = "the search space's TrainSpec" if job.search_space is not None else "tuner_fn"
        doing(f"{what} in {job.module_file} (or its hypermodel's build)")
    tuner = load_tuner(job, job.tuner_dir)
    if job.early_stopping.enabled:
        check_rungs(job.early_stopping, tuner, job.module_file)
        start_rungs(str(tuner.tuner.project_dir))
    return OracleDriver(tuner.tuner, slots, max_trials, job.module_file)


def _search(
    config: PipelineConfig,
    job: TuningJob,
    options: PipelineOptions,
    pool: Optional[LocalWorkerPool],
    stack: contextlib.ExitStack,
) -> Search:
    """Runs the search: tuner_fn in the oracle's process, then its schedule until it stops.

    The oracle lives in a process of its own (a :class:`ProcessHost` that ``stack``
    closes): ``tuner_fn`` and the hypermodel's ``build`` are the user's code, and an exit
    call or a crash in them must end that process, not the launcher.
    """
    started = time.time()
    schedule = _schedule(config, options, pool)
    if config.tuner.trial_timeout is not None and schedule is not TunerSchedule.ROLLING:
        # Only the rolling loop watches each trial's job (and can stop one).
        raise PipelineError(
            f"--trial_timeout works with the rolling schedule only, not {schedule.value}; "
            "pass --tuner_schedule=rolling with it, or leave it out."
        )
    runners = shared.Shared()  # workers keep their loaded tuner from job to job
    # A rolling slot or a search job's loop is a pool process; a round asks for
    # --tuner_parallel_trials trials.
    one_per_process = schedule in (TunerSchedule.ROLLING, TunerSchedule.SEARCH_JOB)
    on_pool = pool is not None and one_per_process
    slots = pool.num_workers if on_pool else config.tuner.parallel_trials
    host = ProcessHost(
        _make_driver,
        (job, slots, config.tuner.max_trials),
        what=f"tuner_fn in {job.module_file}",
        name="tuner-oracle",
    )
    stack.enter_context(host)
    oracle = host.proxy
    search = Search(oracle, {}, True, round(time.time() - started, 3), schedule)
    jobs = TrialJobs(job, config, options, pool, runners)
    if schedule is TunerSchedule.ROLLING:
        run_rolling(search, jobs)
    elif schedule is TunerSchedule.SEARCH_JOB:
        run_search_job(search, jobs)
    else:
        run_rounds(search, jobs)
    return search


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
    inputs: Optional[ModelInputs] = None,
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
      inputs: the Transform stage's outputs and the schema (default: those published in
        ``run_dir``).

    Returns:
      (the StageReport, the path of ``best_hyperparameters.json`` or None). The report is
      OK (tuned) or SKIPPED (disabled, no module file,
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
    # An earlier execution's result is the runner's to reuse (beam_pipeline.engine.runner).
    if search_space is None and not _module_has_tuner_fn(
        module_file, config.trainer.entry_point, staged
    ):
        return (
            StageReport(STAGE, StageStatus.SKIPPED, note=f"{module_file} defines no tuner_fn"),
            None,
        )
    parallel = config.tuner.parallel_trials  # its range: checked by TunerConfig
    staging = run_dir.new_staging(Artifact.TUNER)
    oracle_host = contextlib.ExitStack()  # open until the search's records are read
    try:
        with contextlib.ExitStack() as stack:
            pool = worker_pool
            size = local_pool_size(options, parallel) if pool is None else 0
            if size:
                threads = max(1, (os.cpu_count() or 1) // size)
                # The logs of a lost process stay in the run directory (the run's
                # temporary folder is removed at its end).
                log_parent = None if fileio.is_remote(run_dir.root) else run_dir.root
                pool = stack.enter_context(
                    LocalWorkerPool(
                        size,
                        threads_per_worker=threads,
                        gpus_per_worker=config.tuner.gpus_per_trial,
                        log_parent=log_parent,
                    )
                )
            threads = pool.threads_per_worker if pool is not None else 0
            job = build_tuning_job(
                config,
                run_dir,
                module_file,
                staging,
                threads,
                search_space=search_space,
                staged=staged,
                inputs=inputs,
            )
            search = _search(config, job, options, pool, oracle_host)
            workers = pool.num_workers if pool is not None else None
            restarts = pool.restarts if pool is not None else 0
    except BaseException:
        oracle_host.close()
        run_dir.discard(staging)
        raise
    with oracle_host:
        return _finish_search(
            config, run_dir, options, module_file, staging, search, workers, restarts, started
        )


def _finish_search(
    config: PipelineConfig,
    run_dir: RunDirectory,
    options: PipelineOptions,
    module_file: str,
    staging: str,
    search: Search,
    workers: Optional[int],
    restarts: int,
    started: float,
) -> tuple[StageReport, Optional[str]]:
    """Writes and publishes the search's artifact (or says why there is none)."""
    if not search.ran:
        run_dir.discard(staging)
        configured = with_schedule(config, options).tuner.schedule
        per = "trial" if configured is TunerSchedule.ROLLING else "round"
        note = (
            f"dry run: the first round's job graph ({search.oracle.slots} trials) built only; "
            f"{configured.value} runs a job per {per}"
        )
        if search.schedule is TunerSchedule.SEARCH_JOB:
            note = (
                f"dry run: the whole search is {search.jobs} job of {search.oracle.slots} "
                "worker loops; built only"
            )
        return StageReport(STAGE, StageStatus.SKIPPED, note=note), None

    oracle = search.oracle
    records = oracle.records()
    objective, direction = oracle.objective
    best = oracle.best_hyperparameters()
    timed_out = [r for r in records if (r.error or "").startswith(TIMED_OUT)]
    if best is None and records and len(timed_out) == len(records):
        run_dir.discard(staging)
        raise PipelineError(
            f"All {len(records)} tuning trials ran past --trial_timeout="
            f"{config.tuner.trial_timeout:g} s and were stopped; raise --trial_timeout, or make "
            "the trials shorter (--tuner_train_steps)."
        )
    if best is None:
        run_dir.discard(staging)
        raise PipelineError(
            f"None of the {len(records)} tuning trials completed (last error: "
            f"{oracle.last_error()}); fix the model or the search space in {module_file}."
        )
    try:
        write_text(os.path.join(staging, BEST_HYPERPARAMETERS_FILE), json.dumps(best, indent=2))
        write_trials(staging, records, objective, direction)
        plot_objective(os.path.join(staging, OBJECTIVE_PLOT), records, objective, direction)
    except BaseException:
        run_dir.discard(staging)
        raise
    artifact = run_dir.publish(Artifact.TUNER, staging)
    best_path = os.path.join(artifact, BEST_HYPERPARAMETERS_FILE)
    report = stage_report(records, search, best, artifact, workers, restarts, started)
    return report, best_path
