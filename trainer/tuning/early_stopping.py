"""Early stopping across workers: asynchronous successive halving (ASHA) for any oracle.

keras-tuner never passes a trial's per-epoch results to its oracle, and its Hyperband
waits for each bracket to fill. Here each trial's objective per epoch goes into one
document in the run's shared storage (:mod:`trainer.tuning.shared_state`: a lock file
locally, GCS generations on gs://), beside the tuner project, whichever worker runs it and
whichever schedule hands it out. At each rung (``min_epochs``, ``min_epochs * factor``,
``min_epochs * factor**2``... epochs, short of the fit's last epoch) a trial goes on only
if its objective is in the top ``1/factor`` of the values recorded at that rung so far,
itself included (asynchronous: nobody waits for a rung to fill; the first trial at a rung
always goes on). The rule is Ray Tune's ``AsyncHyperBandScheduler`` cutoff: the
``1 - 1/factor`` quantile of the rung's values, linearly interpolated. The oracle samples
as it would (random, grid, Bayesian, Hyperband): only how long a trial trains changes.

A decision is recorded once per trial and rung and never changes: a trial rerun after its
worker was lost (same attempt, from its first epoch) gets the same decisions, and one
that was stopped before its worker died is not trained again
(:meth:`TrialRunner.run <trainer.tuning.TrialRunner.run>` returns it as STOPPED). A
stopped trial is reported to the oracle as keras-tuner's ``STOPPED``, which
``Oracle.get_best_trials`` never ranks first: the best hyperparameters come from trials
that trained to the end.

The callback is added by the trial runner to the ``fit_kwargs`` of the module's
``tuner_fn``; the module is unchanged.

Example::

    rule = EarlyStopping(EarlyStoppingRule.ASHA, reduction_factor=3, min_epochs=1)
    start_rungs(project_dir)                                     # the launcher, once
    callback = RungCallback(rule, project_dir, "03", oracle.objective)  # a trial's fit
    decision = trial_rungs(project_dir, "03")                   # after it: stopped or not
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Optional

import numpy as np

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from trainer.tuning.shared_state import SharedState, open_shared_state

__all__ = [
    "EARLY_STOPPING_FILE",
    "EarlyStopping",
    "EarlyStoppingRule",
    "TrialRungs",
    "check_rungs",
    "goes_on",
    "goes_on_median",
    "rung_callback",
    "start_rungs",
    "trial_rungs",
]

EARLY_STOPPING_FILE = "beam_early_stopping.json"


class EarlyStoppingRule(str, enum.Enum):
    """Which trials stop before their last epoch: NONE (every trial trains to its end),
    ASHA (asynchronous successive halving, see the module docstring) or MEDIAN (the median
    stopping rule of Google Vizier, at the same rungs: a trial goes on if its objective is
    at least as good as the median of the other trials' at that rung)."""

    NONE = "none"
    ASHA = "asha"
    MEDIAN = "median"


@dataclasses.dataclass(frozen=True)
class EarlyStopping:
    """The rule and its settings (plain values: they travel to the workers in the job).

    Attributes:
      rule: NONE or ASHA.
      reduction_factor: η: at each rung the top 1/η go on; rungs are η times apart.
      min_epochs: the first rung (the grace period): no trial stops before it.
    """

    rule: EarlyStoppingRule = EarlyStoppingRule.NONE
    reduction_factor: int = 3
    min_epochs: int = 1

    @property
    def enabled(self) -> bool:
        return self.rule is not EarlyStoppingRule.NONE

    def rungs(self, epochs: int) -> list[int]:
        """The rungs (in epochs done) of a fit of ``epochs`` epochs, short of its end."""
        rungs, rung = [], self.min_epochs
        while rung < epochs:
            rungs.append(rung)
            rung *= self.reduction_factor
        return rungs


@dataclasses.dataclass(frozen=True)
class TrialRungs:
    """What the shared state knows of one trial.

    Attributes:
      curve: its objective after each epoch (index 0: after the first; NaN for an epoch
        it did not train, before Hyperband's initial epoch).
      rung: the index of the highest rung it reached (0: the first), None if none.
      stopped: it was stopped at that rung.
    """

    curve: tuple[float, ...] = ()
    rung: Optional[int] = None
    stopped: bool = False


def check_rungs(rule: EarlyStopping, loaded: Any, module_file: str) -> None:
    """Refuses early stopping that could never stop a trial (no rung before the last epoch).

    ``loaded``: the module's ``TunerFnResult``. Hyperband sets each trial's epochs itself
    (its first brackets fit a single epoch), so its searches are not checked.

    Raises:
      PipelineError: the fit's ``epochs`` is not above ``min_epochs``.
    """
    import keras_tuner

    if not rule.enabled or isinstance(loaded.tuner.oracle, keras_tuner.oracles.HyperbandOracle):
        return
    epochs = int(loaded.fit_kwargs.get("epochs", 1))
    if not rule.rungs(epochs):
        raise PipelineError(
            f"--tuner_early_stopping={rule.rule.value} can never stop a trial of "
            f"{module_file}: its fit runs {epochs} epoch(s), not more than "
            f"--asha_min_epochs={rule.min_epochs}; give fit more epochs in tuner_fn's "
            "fit_kwargs, lower --asha_min_epochs, or pass --tuner_early_stopping=none."
        )


def _path(project_dir: str) -> str:
    return fileio.join(project_dir, EARLY_STOPPING_FILE)


def _store(project_dir: str) -> SharedState:
    path = _path(project_dir)
    if fileio.is_remote(path) and not path.startswith("gs://"):
        raise PipelineError(
            f"--tuner_early_stopping keeps the trials' rungs in the run's storage, which must "
            f"be a local path or gs://, not {path.split('://', 1)[0]}:// ({project_dir}); "
            "pass --tuner_early_stopping=none for this pipeline root."
        )
    return open_shared_state(path)


def start_rungs(project_dir: str) -> None:
    """Creates the search's rung document unless it is there (a resumed search keeps it)."""
    if not fileio.exists(_path(project_dir)):
        _store(project_dir).create({"rungs": {}, "decisions": {}, "curves": {}})


def trial_rungs(project_dir: str, trial_id: str) -> TrialRungs:
    """The trial's curve and rung decisions so far (empty when the document is absent)."""
    if not fileio.exists(_path(project_dir)):
        return TrialRungs()
    doc = _store(project_dir).read()
    return _trial(doc, trial_id)


def _trial(doc: dict[str, Any], trial_id: str) -> TrialRungs:
    decisions = doc["decisions"].get(trial_id, {})
    curve = tuple(math.nan if v is None else float(v) for v in doc["curves"].get(trial_id, []))
    if not decisions:
        return TrialRungs(curve)
    last = max(decisions, key=int)
    order = sorted(int(e) for e in doc["rungs"])
    return TrialRungs(curve, order.index(int(last)), decisions[last] == "stop")


def goes_on(value: float, recorded: list[float], factor: int, direction: str) -> bool:
    """Whether ``value`` is in the top ``1/factor`` of ``recorded`` (which holds it).

    Ray Tune's ASHA cutoff: the ``1 - 1/factor`` quantile of the recorded values (linear
    interpolation) for a maximized objective, the ``1/factor`` quantile for a minimized
    one; a NaN never goes on.
    """
    if math.isnan(value):
        return False
    values = [v for v in recorded if not math.isnan(v)]
    if direction == "max":
        return value >= float(np.percentile(values, 100 * (1 - 1 / factor)))
    return value <= float(np.percentile(values, 100 / factor))


def goes_on_median(value: float, others: list[float], direction: str) -> bool:
    """Whether ``value`` is at least as good as the median of ``others`` (the other trials'
    values at the rung); with no other value yet it goes on; a NaN never goes on."""
    if math.isnan(value):
        return False
    values = [v for v in others if not math.isnan(v)]
    if not values:
        return True
    median = float(np.median(values))
    return value >= median if direction == "max" else value <= median


def _record(
    doc: dict[str, Any],
    rule: EarlyStopping,
    trial_id: str,
    epoch: int,
    value: float,
    rungs: list[int],
    direction: str,
):
    """The shared document's change after ``trial_id``'s epoch ``epoch`` (1-based)."""
    curve = doc["curves"].setdefault(trial_id, [])
    # A rerun from an earlier epoch overwrites what follows; a fit that starts later
    # (Hyperband's initial_epoch) leaves the epochs before it empty (null).
    curve[epoch - 1 :] = [value]
    curve[:] = [None] * (epoch - len(curve)) + curve if len(curve) < epoch else curve
    if epoch not in rungs:
        return doc, False
    decisions = doc["decisions"].setdefault(trial_id, {})
    if str(epoch) in decisions:  # decided on an earlier attempt: the same decision
        return doc, decisions[str(epoch)] == "stop"
    recorded = doc["rungs"].setdefault(str(epoch), {})
    others = [v for t, v in recorded.items() if t != trial_id]
    recorded[trial_id] = value
    if rule.rule is EarlyStoppingRule.MEDIAN:
        on = goes_on_median(value, others, direction)
    else:
        on = goes_on(value, list(recorded.values()), rule.reduction_factor, direction)
    decisions[str(epoch)] = "continue" if on else "stop"
    return doc, not on


def rung_callback(rule: EarlyStopping, project_dir: str, trial_id: str, objective: Any):
    """A Keras callback that records each epoch's objective and stops the fit at a rung
    where the trial is not in the top ``1/reduction_factor`` (see the module docstring).

    Args:
      rule: the rule (ASHA).
      project_dir: the tuner project's shared folder (the rung document lives there).
      trial_id: the trial being fit.
      objective: the oracle's keras-tuner ``Objective`` (or ``MultiObjective``).
    """
    import keras

    class RungCallback(keras.callbacks.Callback):
        """Stops the fit at a rung it does not pass (keras-tuner deep-copies callbacks per
        execution, so it keeps no state of its own: the shared document holds it)."""

        def on_epoch_end(self, epoch, logs=None):
            logs = logs or {}
            try:
                value = float(objective.get_value(logs))
            except KeyError:
                raise ValueError(
                    f"--tuner_early_stopping needs the objective {objective.name!r} after "
                    f"every epoch, but the fit logged only {sorted(logs)}; pass validation "
                    "data to fit or choose an objective the fit logs."
                ) from None
            epochs = int((self.params or {}).get("epochs") or 0)
            rungs = rule.rungs(epochs)
            direction = objective.direction
            stop = _store(project_dir).update(
                lambda doc: _record(doc, rule, trial_id, epoch + 1, value, rungs, direction)
            )
            if stop:
                self.model.stop_training = True

    return RungCallback()
