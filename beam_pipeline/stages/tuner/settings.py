"""The Tuner's settings (its section of the run's config) and its schedules.

Kept apart from the declaration (:mod:`beam_pipeline.stages.tuner.stage`) because the
search's own modules read them too, and the declaration imports the search lazily.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.engine.config import check_int, check_seconds
from beam_pipeline.engine.stage import switch

__all__ = ["TunerConfig", "TunerSchedule"]


class TunerSchedule(str, enum.Enum):
    """How the tuner's trials are handed to workers.

    ROLLING: a worker that finishes a trial gets the next one at once (each trial is its
    own small job, several run at a time); every worker stays busy, but an adaptive
    oracle (BayesianOptimization) sees results in the order they finish.
    ROUNDS: synchronous rounds of ``parallel_trials`` trials; the next round starts when
    the round's slowest trial ends; an adaptive oracle's trials are the same on a rerun.
    SEARCH_JOB: one job for the whole search: a long-lived loop per slot, each on its own
    worker, claims the next trial from the oracle's state in the run's storage (an atomic
    compare-and-swap per ask and report), runs it and reports it; a lost worker's trial is
    re-issued when its lease (``lease_seconds``) runs out. No job start-up per trial.

    Left unset, the runner decides (:func:`beam_pipeline.stages.tuner.schedule.default_schedule`):
    SEARCH_JOB where every job starts workers of its own (Dataflow, Flink, Spark, a portable
    job server), ROLLING on the DirectRunner and Beam's embedded job service.
    """

    ROLLING = "rolling"
    ROUNDS = "rounds"
    SEARCH_JOB = "search_job"


def _schedule(value: Any) -> TunerSchedule:
    try:
        return TunerSchedule(value)
    except ValueError:
        raise PipelineError(
            f"tuner_schedule: {value!r} is not a schedule; use one of "
            f"{', '.join(s.value for s in TunerSchedule)}."
        ) from None


def _early_stopping(value: Any) -> Any:
    from trainer.tuning.early_stopping import EarlyStoppingRule

    try:
        return EarlyStoppingRule(value)
    except ValueError:
        raise PipelineError(
            f"tuner_early_stopping: {value!r} is not an early-stopping rule; use one of "
            f"{', '.join(r.value for r in EarlyStoppingRule)}."
        ) from None


def _search_space(value: Any) -> Any:
    from trainer.tuning.search_space import SearchSpace

    if not isinstance(value, dict):
        raise PipelineError(
            "search_space in --config must be a mapping (algorithm, objective, "
            "hyperparameters: {...}); see docs/tuning.md."
        )
    return SearchSpace.from_mapping(value)


@dataclasses.dataclass(frozen=True)
class TunerConfig:
    """Settings of the tuning stage. ``search_space`` is a search space declared in the
    YAML config (``search_space:``), used with a TrainSpec module that has no
    ``tuner_fn``; ``trial_timeout`` is not part of the run's identity."""

    enabled: bool = switch("Do not tune: train with --hyperparameters or the module's own.")
    parallel_trials: int = setting(
        2,
        flag="tuner_parallel_trials",
        help="Trials that run at once, each on a worker.",
        kind="int",
    )
    schedule: Optional[TunerSchedule] = setting(
        None,
        flag="tuner_schedule",
        help="rolling: a worker that finishes a trial starts the next at once (a job per "
        "trial); rounds: synchronous rounds (reproducible adaptive searches); search_job: "
        "one job per search, each worker claims trials from the oracle's state in the run's "
        "storage. Default: search_job on Dataflow, Flink, Spark and portable job servers, "
        "rolling on the DirectRunner and the embedded job service.",
        kind="choice",
        choices=tuple(s.value for s in TunerSchedule),
        parse=_schedule,
    )
    max_trials: Optional[int] = setting(
        None,
        flag="tuner_max_trials",
        help="Most trials (default: the tuner_fn's own limit).",
        kind="int",
    )
    train_steps: int = setting(
        20, flag="tuner_train_steps", help="Training steps of each trial.", kind="int"
    )
    eval_steps: int = setting(
        5, flag="tuner_eval_steps", help="Evaluation steps of each trial.", kind="int"
    )
    accelerator: Optional[str] = setting(
        None,
        flag="tuner_accelerator",
        help="A trial worker's accelerator, as --trainer_accelerator.",
    )
    min_ram: Optional[str] = setting(
        None, flag="tuner_min_ram", help="A trial worker's least memory, e.g. 16GB."
    )
    lease_seconds: int = setting(
        120,
        flag="tuner_lease_seconds",
        help="search_job: a trial whose worker stopped renewing it this long is re-issued.",
        kind="int",
    )
    search_space: Any = setting(
        None,
        flag="search_space",
        help="A search space (algorithm, objective, hyperparameters) for a TrainSpec module "
        "without tuner_fn.",
        kind="yaml",
        parse=_search_space,
    )
    gpus_per_trial: int = setting(
        0,
        flag="gpus_per_trial",
        help="GPUs of its own for each local trial worker on a multi-GPU host (default 0: shared).",
        kind="int",
    )
    trial_timeout: Optional[float] = setting(
        None,
        flag="trial_timeout",
        help="Seconds a tuning trial may run; past it, it is stopped and recorded as timed "
        "out (default: no limit).",
        kind="float",
        identity=False,
    )

    early_stopping: Any = setting(
        "none",
        flag="tuner_early_stopping",
        help="asha: trials report their objective each epoch to the search's shared state "
        "and stop at a rung (--asha_min_epochs x --asha_reduction_factor^k epochs) unless "
        "in the top 1/reduction_factor of the trials that reached it; median: at the same "
        "rungs, stop unless at least as good as the median of the others there; none: every "
        "trial trains to its end.",
        kind="choice",
        choices=("none", "asha", "median"),
        parse=_early_stopping,
    )
    asha_reduction_factor: int = setting(
        3,
        flag="asha_reduction_factor",
        help="asha: the top 1/this of a rung's trials go on; rungs are this many times apart.",
        kind="int",
    )
    asha_min_epochs: int = setting(
        1,
        flag="asha_min_epochs",
        help="asha: the first rung (grace period): no trial stops before this many epochs.",
        kind="int",
    )

    @property
    def early_stopping_rule(self) -> Any:
        """The rule and its settings, as the trial workers get them."""
        from trainer.tuning.early_stopping import EarlyStopping

        return EarlyStopping(self.early_stopping, self.asha_reduction_factor, self.asha_min_epochs)

    def __post_init__(self):
        object.__setattr__(self, "early_stopping", _early_stopping(self.early_stopping))
        check_int("asha_reduction_factor", self.asha_reduction_factor, 2)
        check_int("asha_min_epochs", self.asha_min_epochs, 1)
        check_int("tuner_parallel_trials", self.parallel_trials, 1)
        check_int("gpus_per_trial", self.gpus_per_trial, 0)
        check_int("tuner_lease_seconds", self.lease_seconds, 1)
        if self.max_trials is not None:
            check_int("tuner_max_trials", self.max_trials, 1)
        check_int("tuner_train_steps", self.train_steps, 1)
        check_int("tuner_eval_steps", self.eval_steps, 1)
        if self.trial_timeout is not None:
            check_seconds("trial_timeout", self.trial_timeout, "3600", unlimited=True)
