"""The Tuner stage's work: the hooks' bodies that start its pool, watch and run the search.

The search itself is :func:`beam_pipeline.stages.tuner.tuning.run_tuning_stage`, which stages and
publishes ``tuner/`` itself; :func:`run` gives it Transform's outputs and the schema, and
reports the best hyperparameters as the stage's output (none when the stage was skipped).

Its worker pool (:func:`default_tuner_pool`) is started with the run (:func:`start`), so that
its processes import TensorFlow while the data stages run, and stopped after the search.

Example::

    pool = default_tuner_pool(config, options)   # started while the data stages run
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core.fileio import is_remote
from beam_pipeline.core.gpus import check_gpus_per_trial, host_gpus
from beam_pipeline.engine.artifacts import Hyperparameters, TypedArtifact
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.engine.run_dir import RunDirectory
from beam_pipeline.engine.stage import Outputs, Preflight, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.common.model_job import model_inputs

if TYPE_CHECKING:
    from beam_pipeline.runtime.pool import LocalWorkerPool

__all__ = [
    "check_trial_gpus",
    "default_tuner_pool",
    "preflight",
    "progress",
    "run",
    "start",
]


def _default_pool_workers(config: PipelineConfig, options) -> int:
    """The processes of :func:`default_tuner_pool`'s pool; 0 where it makes none."""
    from beam_pipeline.runtime.options import is_direct

    if (
        not config.tuner.enabled
        or not is_direct(options)
        or config.tuner.parallel_trials < 2
        or any(a.startswith("--direct_running_mode") for a in config.beam_args)
    ):
        return 0
    return max(1, min(config.tuner.parallel_trials, os.cpu_count() or 1))


def check_trial_gpus(config: PipelineConfig, options) -> None:
    """Refuses a ``--gpus_per_trial`` this host's GPUs cannot give every local trial
    worker process, before the run writes anything (the pool would refuse it later).

    Raises:
      PipelineError: several GPUs, fewer than the workers' shares.
    """
    from beam_pipeline.runtime.pool import local_pool_size

    if not config.tuner.gpus_per_trial:
        return
    parallel = config.tuner.parallel_trials
    workers = _default_pool_workers(config, options) or local_pool_size(options, parallel)
    if workers:
        check_gpus_per_trial(config.tuner.gpus_per_trial, workers, host_gpus())


def default_tuner_pool(
    config: PipelineConfig, options, run_dir: Optional[RunDirectory] = None
) -> Optional[LocalWorkerPool]:
    """Worker processes for the trials when the user left the DirectRunner's mode unset.

    Trials are heavy elements: by default they run ``--tuner_parallel_trials`` at a time
    (at most one per core) in worker processes, although the data stages run in_memory. A
    ``--direct_running_mode`` the user gives decides instead (see ``run_tuning_stage``).
    """
    from beam_pipeline.runtime.pool import LocalWorkerPool

    workers = _default_pool_workers(config, options)
    if not workers:
        return None
    cores = os.cpu_count() or 1
    log_parent = run_dir.root if run_dir is not None and not is_remote(run_dir.root) else None
    return LocalWorkerPool(
        workers,
        threads_per_worker=max(1, cores // workers),
        gpus_per_worker=config.tuner.gpus_per_trial,
        log_parent=log_parent,
    )


def _tunes(config: PipelineConfig, user_module: Any) -> bool:
    """Whether the run searches: its module (``trainer.TrainerModule``, or None) trains a
    model and defines a search (``tuner_fn`` or a config search space). A module with
    nothing to train is not tuned either (the stage says so)."""
    from trainer.module_loader import ModuleKind

    return (
        user_module is not None
        and user_module.kind is not ModuleKind.NONE
        and (
            callable(getattr(user_module.module, "tuner_fn", None))
            or bool(config.tuner.search_space)
        )
    )


def _nothing_to_train(ctx: StageContext) -> str:
    """Why the run's module gives the search no model to tune ('' when it trains one)."""
    config = ctx.config
    if not config.module_file:
        return ""  # run_tuning_stage says why it skips
    from trainer.module_loader import ModuleKind, load_trainer_module

    loaded = load_trainer_module(
        config.module_file, entry_point=config.trainer.entry_point, staged=ctx.staged
    )  # loaded already by the run's checks: not executed again
    if loaded.kind is not ModuleKind.NONE:
        return ""
    return (
        f"{config.module_file} defines no run_fn or TrainSpec subclass, so there is no model "
        "to tune"
    )


def _maximizes(trial: dict, score: float) -> bool:
    """Whether the objective that gave ``score`` is maximized (from the trial's metrics)."""
    for metric in (trial.get("metrics") or {}).get("metrics", {}).values():
        values = [v for o in metric.get("observations", []) for v in o.get("value", [])]
        if score in values:
            return metric.get("direction") == "max"
    return True


def preflight(run: Preflight) -> None:
    """The stage's preflight hook: the host's GPUs for ``--gpus_per_trial``, checked
    before anything is written."""
    if _tunes(run.config, run.user_module):
        check_trial_gpus(run.config, run.options)


def start(ctx: StageContext) -> Optional[LocalWorkerPool]:
    """The stage's start hook: the trials' worker pool, started now: its processes import
    TensorFlow while the data stages run, instead of after them (closed by :func:`run`
    after the search)."""
    config = ctx.config
    if not config.module_file or not _default_pool_workers(config, ctx.options):
        return None  # no pool to start (its settings or runner say so): the module unread
    from trainer.module_loader import load_trainer_module

    loaded = load_trainer_module(
        config.module_file, entry_point=config.trainer.entry_point, staged=ctx.staged
    )  # loaded already by the run's checks: not executed again
    if not _tunes(config, loaded):
        return None
    return default_tuner_pool(config, ctx.options, ctx.run_dir)


def progress(run_dir: str) -> str:
    """The stage's progress hook: 'trials: 3 done, 2 running, 0 failed; best 0.97' from
    keras-tuner's trial files."""
    patterns = ("tuner/*/trial_*/trial.json", ".staging/*/*/trial_*/trial.json")
    statuses: dict[str, str] = {}
    best: Optional[float] = None
    for pattern in patterns:
        for path in glob.glob(os.path.join(run_dir, pattern)):
            try:
                with open(path, encoding="utf-8") as f:
                    trial = json.load(f)
            except (OSError, ValueError):  # being written: read it on the next poll
                continue
            statuses[str(trial.get("trial_id"))] = str(trial.get("status"))
            score = trial.get("score")
            if isinstance(score, (int, float)) and trial.get("status") == "COMPLETED":
                maximize = _maximizes(trial, score)
                if best is None or (score > best if maximize else score < best):
                    best = score
    if not statuses:
        return ""
    done = sum(s == "COMPLETED" for s in statuses.values())
    failed = sum(s in ("FAILED", "INVALID") for s in statuses.values())
    running = len(statuses) - done - failed
    text = f"trials: {done} done, {running} running, {failed} failed"
    return text + (f"; best {best:.4g}" if best is not None else "")


def run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    out: Outputs,
) -> StageResult:
    """The stage's ``run`` hook: the search (in the pool :func:`start` started, if any),
    reported with the best hyperparameters as the stage's output."""
    from beam_pipeline.stages.tuner.tuning import (
        BEST_HYPERPARAMETERS_FILE,
        STAGE,
        run_tuning_stage,
    )

    untrained = _nothing_to_train(ctx)
    if untrained:
        # Hyperparameters that nothing trains with are no result: the search is not run.
        return StageResult([StageReport(STAGE, StageStatus.SKIPPED, note=untrained)])
    # The early-started pool (if any) serves this search and is stopped after it.
    with ctx.started(stage) as pool:
        report, best = run_tuning_stage(
            ctx.config,
            ctx.run_dir,
            ctx.options,
            worker_pool=pool,
            search_space=ctx.config.tuner.search_space,
            staged=ctx.staged,
            inputs=model_inputs(inputs),
        )
    outputs = ()
    if best is not None:
        outputs = (out.artifact(Hyperparameters, file=BEST_HYPERPARAMETERS_FILE),)
    return StageResult([report], outputs=outputs)
