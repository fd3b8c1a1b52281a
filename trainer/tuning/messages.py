"""What travels between the launcher and the workers of a search: the job, trials, results.

Plain frozen values (they are Beam elements and JSON files), as keras-tuner's
``engine/trial.py`` holds its ``Trial`` apart from the oracle and the tuner:

- :class:`TuningJob`: what every trial of one search needs (sent once per job);
- :class:`TrialSpec`: one trial to run (the launcher asks the oracle for it);
- :class:`TrialResult`: what one attempt of it did (the worker writes it, see
  :mod:`trainer.tuning.result_files`);
- :class:`TrialRecord`: one row of the trials table the stage publishes.

Example::

    spec = TrialSpec(trial_id="03", attempt=0, hyperparameters=hp.get_config(),
                     project_dir="/run/tuner/project")
    TrialResult.from_json(result.to_json()) == result
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any, Optional

from trainer.job import ModelJob
from trainer.tuning.early_stopping import EarlyStopping
from trainer.tuning.search_space import SearchSpace

__all__ = ["TrialRecord", "TrialResult", "TrialSpec", "TrialStatus", "TuningJob"]


class TrialStatus(str, enum.Enum):
    """How a trial ended; the values are keras-tuner's ``TrialStatus`` strings.

    INVALID: the trial raised; the oracle retries it up to its ``max_retries_per_trial``
    (0 by default) and then records it FAILED. FAILED: it raised keras-tuner's
    ``FailedTrialError`` (no retry), or ran out of retries. STOPPED: early stopping
    (``--tuner_early_stopping``) ended it at a rung; never the best trial.
    """

    COMPLETED = "COMPLETED"
    STOPPED = "STOPPED"
    INVALID = "INVALID"
    FAILED = "FAILED"


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuningJob(ModelJob):
    """What every trial of one search needs (plain values: it travels to the workers).

    The fields of :class:`trainer.job.ModelJob` (module, data, the tuning run's
    ``train_steps`` / ``eval_steps``, custom_config, and as ``entry_point`` the TrainSpec
    subclass to tune with a search space when the module has several), and:

    Attributes:
      tuner_dir: the shared tuner folder: ``fn_args.working_dir`` on the launcher; the
        tuner project (oracle state, trial checkpoints, results) lives in it.
      threads_per_trial: TensorFlow intra-op threads of a trial's process (0: TF's default).
      search_space: a search space declared in the pipeline config; with it, a module
        whose model is a :class:`trainer.TrainSpec` subclass is tuned without a
        ``tuner_fn`` (see :class:`SearchSpace`).
      early_stopping: which trials stop at a rung (:mod:`trainer.tuning.early_stopping`).
    """

    tuner_dir: str
    threads_per_trial: int = 0
    search_space: Optional[SearchSpace] = None
    early_stopping: EarlyStopping = dataclasses.field(default_factory=EarlyStopping)


@dataclasses.dataclass(frozen=True)
class TrialSpec:
    """One trial to run: a Beam element.

    Attributes:
      trial_id: the oracle's trial id.
      attempt: 0 for the first run of the trial, n for the oracle's n-th retry of it.
      hyperparameters: the trial's ``HyperParameters.get_config()`` (Hyperband's
        ``tuner/epochs``, ``tuner/initial_epoch`` and ``tuner/trial_id`` among its values).
      project_dir: the tuner project's shared folder (trial checkpoints are read and
        written there).
      round: the round of the search that asked for it (0-based).
    """

    trial_id: str
    attempt: int
    hyperparameters: Mapping[str, Any]
    project_dir: str
    round: int = 0


@dataclasses.dataclass(frozen=True)
class TrialResult:
    """What one attempt of a trial did.

    Attributes:
      trial_id / attempt: which trial attempt.
      status: COMPLETED, STOPPED (early stopping ended it at a rung), INVALID (raised)
        or FAILED (``FailedTrialError``).
      hyperparameters: the trial's HyperParameters config after the model was built (a
        build may register new hyperparameters; the oracle learns them from here).
      metrics: the objective and the other metrics at the best epoch (COMPLETED only).
      best_step: the best epoch, as keras-tuner reports it.
      error: ``ErrorType: message (module.py:line)`` when the trial raised.
      traceback: the full traceback when it raised.
      fatal: the error ends the whole search (keras-tuner's ``FatalError``, a
        ``tuner_fn`` that fails on the worker, or data no trial can train on).
      sentence: for a fatal error that is the data's, the run's whole error sentence.
      seconds: wall time of the attempt (build + fit).
      started: when the attempt started (seconds since the epoch, the worker's clock).
      worker: ``host:pid`` of the process that ran it.
      reused: the result of an earlier, finished run of this attempt (a runner retry).
      curve: with early stopping, the objective after each epoch it trained.
      rung: with early stopping, the index of the highest rung it reached (None: none).
    """

    trial_id: str
    attempt: int
    status: TrialStatus
    hyperparameters: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
    best_step: int = 0
    error: Optional[str] = None
    traceback: Optional[str] = None
    fatal: bool = False
    sentence: Optional[str] = None
    seconds: float = 0.0
    worker: str = ""
    reused: bool = False
    started: float = 0.0
    curve: tuple[float, ...] = ()
    rung: Optional[int] = None

    @classmethod
    def failed(cls, spec: TrialSpec, status: TrialStatus, error: str, **fields: Any) -> TrialResult:
        """The result of ``spec``'s attempt that ended with ``error`` (its hyperparameters as sent).

        Args:
          spec: the trial attempt.
          status: INVALID (the oracle may retry it) or FAILED.
          error: why, in one line.
          **fields: the other fields (``fatal``, ``seconds``, ``worker``...).
        """
        hyperparameters = dict(spec.hyperparameters)
        return cls(spec.trial_id, spec.attempt, status, hyperparameters, error=error, **fields)

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrialResult:
        d = json.loads(text)
        d["status"] = TrialStatus(d["status"])
        d["curve"] = tuple(d.get("curve", ()))
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """One row of the trials table.

    Attributes:
      trial_id: the oracle's trial id.
      status: COMPLETED, STOPPED or FAILED (INVALID while a retry is pending).
      objective: the oracle's score of the trial (COMPLETED and STOPPED only).
      hyperparameters: the trial's hyperparameter values.
      metrics: its metrics at the best epoch.
      seconds: wall time of its last attempt.
      started: when its last attempt started (seconds since the epoch, the worker's clock).
      worker: ``host:pid`` of the process that ran its last attempt.
      attempts: how many times it ran.
      round: the round of its last attempt.
      error: why it failed.
      epochs: with early stopping, the epochs it trained (0: not tracked).
      rung: with early stopping, the index of the highest rung it reached.
    """

    trial_id: str
    status: TrialStatus
    objective: Optional[float]
    hyperparameters: Mapping[str, Any]
    metrics: Mapping[str, float]
    seconds: float
    worker: str
    attempts: int
    round: int
    error: Optional[str] = None
    started: float = 0.0
    epochs: int = 0
    rung: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        return d
