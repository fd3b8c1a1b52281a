"""The launcher side of a search: :class:`OracleDriver` hands a keras-tuner oracle's trials out.

The role of keras-tuner's ``distribute/oracle_chief.py``, without a server: the oracle
(RandomSearch, GridSearch, BayesianOptimization, Hyperband) stays in the launcher, is asked
for trials (``create_trial`` with one tuner id per slot, as that many keras-tuner workers
would) and told their results (``update_trial`` / ``end_trial``, which also save its state
to the tuner folder), until it stops or ``max_trials`` is reached. A trial that raises is
recorded with its error and the search goes on; keras-tuner's
``max_consecutive_failed_trials`` still ends a hopeless search, here as a PipelineError.
How the trials run (a Beam job per round, or per trial as slots free up) is the stage's
schedule (:mod:`beam_pipeline.stages.tuner`).

Example (a whole search in one process, with :class:`trainer.tuning.TrialRunner`)::

    oracle = OracleDriver(load_tuner(job, job.tuner_dir).tuner, parallel_trials=2, max_trials=4)
    runner = TrialRunner(job)
    while specs := oracle.next_round():
        oracle.report({s.trial_id: runner.run(s) for s in specs})
    oracle.best_hyperparameters()                # a HyperParameters config
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import pickle
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core.errors import PipelineError, first_line
from trainer.tuning.messages import TrialRecord, TrialResult, TrialSpec, TrialStatus

if TYPE_CHECKING:
    import keras_tuner

__all__ = ["OracleDriver"]

# What each process keeps of its own oracle when it loads a shared state (OracleDriver.state).
_OWN_ATTRIBUTES = frozenset(
    {"_display", "directory", "_directory", "project_name", "_project_name"}
)


class OracleDriver:
    """Drives a keras-tuner oracle for up to ``parallel_trials`` trials at once (launcher side).

    Two ways to drive it, both asking the oracle from this one place (each ask is one
    round: :attr:`rounds` counts them, a trial's ``round`` says which asked for it):

    - synchronous rounds: :meth:`next_round` asks a trial for every slot, the caller runs
      them all and reports them all with :meth:`report`, then asks again;
    - rolling rounds: :meth:`ask` asks trials for the free slots only (``count`` of them)
      while other slots' trials still run, and :meth:`report` ends just the trials given.
      A slot that frees gets its next trial at once, as a keras-tuner worker asks the
      oracle for its next trial when it is done; no slot waits for a round's slowest trial.

    Each slot has its own tuner id, so the oracle hands out that many trials at once, as
    it would to that many keras-tuner workers.

    Args:
      tuner: the launcher's tuner (from :func:`load_tuner`); its oracle is driven.
      parallel_trials: slots: trials that run at once.
      max_trials: caps the oracle's own ``max_trials`` (Hyperband has none by default).
      module_file: named in error messages.

    Raises:
      PipelineError: ``parallel_trials`` or ``max_trials`` below 1.
    """

    def __init__(
        self,
        tuner: keras_tuner.engine.base_tuner.BaseTuner,
        parallel_trials: int,
        max_trials: Optional[int] = None,
        module_file: str = "",
    ) -> None:
        if parallel_trials < 1 or (max_trials is not None and max_trials < 1):
            raise PipelineError(
                f"--tuner_parallel_trials={parallel_trials} / --tuner_max_trials={max_trials} "
                "are out of range; pass values of at least 1."
            )
        self._tuner = tuner
        self._oracle = tuner.oracle
        self._module_file = module_file
        if max_trials is not None and not self._oracle.trials:
            own = self._oracle.max_trials
            self._oracle.max_trials = max_trials if own is None else min(own, max_trials)
        self._oracle.verbose = 0  # the stage reports the trials; keras-tuner would print them
        self._tuner_ids = tuple(f"beam-trial-slot-{i}" for i in range(parallel_trials))
        self._results: dict[str, TrialResult] = {}
        self._pending: dict[str, tuple[str, TrialSpec]] = {}  # trial id -> (tuner id, spec)
        self._round_of: dict[str, int] = {}
        self.rounds = 0

    @property
    def project_dir(self) -> str:
        """The tuner project's shared folder."""
        return str(self._tuner.project_dir)

    @property
    def objective(self) -> tuple[str, str]:
        """(name, direction) of the oracle's objective."""
        return self._oracle.objective.name, self._oracle.objective.direction

    @property
    def slots(self) -> int:
        """How many trials run at once."""
        return len(self._tuner_ids)

    @property
    def running(self) -> list[TrialSpec]:
        """The trials asked for and not reported yet."""
        return [spec for _, spec in self._pending.values()]

    def next_round(self) -> list[TrialSpec]:
        """Asks the oracle for the next round's trials; an empty list when the search is over.

        Raises:
          PipelineError: the previous round was not reported.
        """
        if self._pending:
            raise PipelineError(
                "OracleDriver.next_round was called before the previous round's results were "
                "reported; call report() first."
            )
        return self.ask()

    def ask(self, count: Optional[int] = None, slot: Optional[int] = None) -> list[TrialSpec]:
        """Asks the oracle for trials for up to ``count`` free slots (default: all free ones).

        The trials asked in one call form one round. An empty list means the oracle has
        nothing to run now: the search is over when no trial is running either; otherwise
        it may wait for running trials (Hyperband's next rung), so ask again after a report.
        ``slot``: ask for that slot only (a search job's worker asks for its own).
        """
        busy = {tuner_id for tuner_id, _ in self._pending.values()}
        free = [t for t in self._tuner_ids if t not in busy]
        if slot is not None:
            free = [t for t in free if t == self._tuner_ids[slot]]
        specs = []
        for tuner_id in free[:count] if count is not None else free:
            trial = self._oracle.create_trial(tuner_id)
            if trial.status != "RUNNING":
                # STOPPED: the search is over; IDLE: the oracle waits for running trials
                # (Hyperband's next rung). Either way, no more trials this round.
                break
            run_times = getattr(self._oracle, "_run_times", {})
            spec = TrialSpec(
                trial_id=trial.trial_id,
                attempt=int(run_times.get(trial.trial_id, 0)),
                hyperparameters=trial.hyperparameters.get_config(),
                project_dir=self.project_dir,
                round=self.rounds,
            )
            self._pending[spec.trial_id] = (tuner_id, spec)
            self._round_of[spec.trial_id] = self.rounds
            specs.append(spec)
        if specs:
            self.rounds += 1
        return specs

    def report(
        self,
        results: Mapping[str, TrialResult],
        trials: Optional[Sequence[TrialSpec]] = None,
    ) -> None:
        """Reports trials' results to the oracle (trial id order) and saves its state.

        Args:
          results: results by trial id.
          trials: the trials to end (their slots free up); default: every running trial.
            A trial with no result (its worker was lost for good) is reported as raised.

        Raises:
          PipelineError: a fatal trial error, or keras-tuner's limit of consecutive
            failed trials was reached.
        """
        import keras_tuner

        ended = self.running if trials is None else list(trials)
        for spec in ended:
            self._pending.pop(spec.trial_id, None)
        for spec in sorted(ended, key=lambda s: s.trial_id):
            result = results.get(spec.trial_id)
            if result is None:
                error = "no result came back from the worker that ran it"
                result = TrialResult.failed(spec, TrialStatus.INVALID, error)
            self._results[spec.trial_id] = result
            if result.fatal:
                raise PipelineError(
                    result.sentence
                    or f"Trial {spec.trial_id} hit an error that stops the whole search "
                    f"({result.error}); fix tuner_fn or the model in {self._module_file}."
                )
            trial = self._oracle.get_trial(spec.trial_id)
            if result.hyperparameters:
                trial.hyperparameters = keras_tuner.HyperParameters.from_config(
                    dict(result.hyperparameters)
                )
            status = result.status
            if status in (TrialStatus.COMPLETED, TrialStatus.STOPPED):
                try:
                    self._observe_curve(spec.trial_id, result)
                    self._oracle.update_trial(
                        spec.trial_id, dict(result.metrics), step=result.best_step
                    )
                except ValueError as e:  # the objective is not among the metrics
                    status = TrialStatus.FAILED
                    self._results[spec.trial_id] = dataclasses.replace(
                        result, status=status, error=f"ValueError: {first_line(e)}"
                    )
            # A stopped trial is COMPLETED to the oracle, with its objective at its last
            # epoch's best: every oracle's sampling learns from it (keras-tuner's STOPPED
            # would be skipped by most oracles, and BayesianOptimization's vectorizer
            # mis-scores it); this driver keeps it STOPPED and never ranks it the best.
            oracle_status = TrialStatus.COMPLETED if status is TrialStatus.STOPPED else status
            trial.status = oracle_status.value
            trial.message = result.traceback or self._results[spec.trial_id].error
            try:
                self._oracle.end_trial(trial)
            except RuntimeError as e:
                if "consecutive failures" not in str(e):
                    raise
                limit = self._oracle.max_consecutive_failed_trials
                raise PipelineError(
                    f"Tuning stopped: {limit} trials in a row failed (keras-tuner's "
                    f"max_consecutive_failed_trials={limit}), the last one with "
                    f"{self._results[spec.trial_id].error}; fix the model or the search space "
                    f"in {self._module_file}."
                ) from None
        self._oracle.save()

    def _observe_curve(self, trial_id: str, result: TrialResult) -> None:
        """The objective after each epoch (early stopping records it), as keras-tuner's
        observations: the report's per-epoch curves then show where each trial stopped."""
        name = self._oracle.objective.name
        if not result.curve or name not in result.metrics:
            return
        for step, value in enumerate(result.curve):
            # The best step's observation comes next, with all of its metrics.
            if step != result.best_step and not math.isnan(value):
                self._oracle.update_trial(trial_id, {name: value}, step=step)

    def pending_slot(self, trial_id: str) -> int:
        """The slot that runs pending trial ``trial_id``."""
        return self._tuner_ids.index(self._pending[trial_id][0])

    def move_trial(self, trial_id: str, slot: int) -> TrialSpec:
        """Hands pending trial ``trial_id`` to ``slot`` (its worker was lost); same attempt.

        The oracle's ongoing trial moves from the old slot's tuner id to the new one's, as
        if that tuner had been running it all along; nothing else changes, so the trial
        counts once whoever finishes it.
        """
        old, spec = self._pending[trial_id]
        new = self._tuner_ids[slot]
        if old != new:
            trial = self._oracle.ongoing_trials.pop(old)
            self._oracle.ongoing_trials[new] = trial
            self._pending[trial_id] = (new, spec)
        return spec

    def state(self) -> dict[str, Any]:
        """Everything this driver and its oracle know, as plain JSON values.

        The oracle's own attributes (its trials, and whatever its class keeps), pickled:
        keras-tuner's ``Oracle.get_state`` (what ``oracle.json`` holds) misses state some
        oracles keep elsewhere (GridSearch's ordered trial list and queue, Bayesian
        optimization's random generator), and a worker that loads only it asks a
        GridSearch for a trial it cannot place. cloudpickle, because the oracle's
        defaultdicts hold lambdas. Not its display nor its project folder (each process
        keeps its own). :meth:`load_state` on a driver of the same ``tuner_fn`` restores
        it; the state is trusted as the run's storage is (Beam's job graph is pickled too).
        """
        import cloudpickle

        attributes = {k: v for k, v in vars(self._oracle).items() if k not in _OWN_ATTRIBUTES}
        return {
            "oracle": base64.b64encode(cloudpickle.dumps(attributes)).decode("ascii"),
            "results": {tid: json.loads(r.to_json()) for tid, r in self._results.items()},
            "pending": {
                tid: [tuner_id, dataclasses.asdict(spec)]
                for tid, (tuner_id, spec) in self._pending.items()
            },
            "round_of": dict(self._round_of),
            "rounds": self.rounds,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Makes this driver and its oracle what :meth:`state` recorded (see there)."""
        attributes = pickle.loads(base64.b64decode(state["oracle"]))
        vars(self._oracle).update(attributes)
        self._results = {
            tid: TrialResult.from_json(json.dumps(r)) for tid, r in state["results"].items()
        }
        self._pending = {
            tid: (tuner_id, TrialSpec(**spec)) for tid, (tuner_id, spec) in state["pending"].items()
        }
        self._round_of = dict(state["round_of"])
        self.rounds = int(state["rounds"])

    def save(self) -> None:
        """Writes the oracle's files (``oracle.json``, each ``trial.json``) from its state.

        After a search job, whose workers wrote them as they went: a write of a worker
        whose change then lost the race to another's is overwritten with the final state.
        """
        for trial in self._oracle.trials.values():
            self._oracle._save_trial(trial)  # noqa: SLF001  keras-tuner's own file layout
        self._oracle.save()

    def records(self) -> list[TrialRecord]:
        """The trials table, in the order the trials started."""
        rows = []
        order = list(self._oracle.start_order) or sorted(self._oracle.trials)
        for trial_id in order:
            trial = self._oracle.trials[trial_id]
            result = self._results.get(trial_id)
            try:
                status = TrialStatus(trial.status)
            except ValueError:  # RUNNING: asked for but never reported
                status = TrialStatus.INVALID
            if result and result.status is TrialStatus.STOPPED and not result.error:
                status = TrialStatus.STOPPED  # COMPLETED to the oracle (see report)
            completed = status in (TrialStatus.COMPLETED, TrialStatus.STOPPED)
            rows.append(
                TrialRecord(
                    trial_id=trial_id,
                    status=status,
                    objective=float(trial.score) if completed and trial.score is not None else None,
                    hyperparameters=dict(trial.hyperparameters.values),
                    metrics=dict(result.metrics) if result else {},
                    seconds=result.seconds if result else 0.0,
                    worker=result.worker if result else "",
                    attempts=(result.attempt + 1) if result else 0,
                    round=self._round_of.get(trial_id, -1),
                    error=None if completed or not result else result.error,
                    started=result.started if result else 0.0,
                    epochs=sum(not math.isnan(v) for v in result.curve) if result else 0,
                    rung=result.rung if result else None,
                )
            )
        return rows

    def _best(self):
        """The oracle's best COMPLETED trial that early stopping did not stop, or None."""
        stopped = {t for t, r in self._results.items() if r.status is TrialStatus.STOPPED}
        for trial in self._oracle.get_best_trials(len(self._oracle.trials)):
            if trial.status == TrialStatus.COMPLETED.value and trial.trial_id not in stopped:
                return trial
        return None

    def best_hyperparameters(self) -> Optional[dict[str, Any]]:
        """The best completed trial's HyperParameters config, or None when none completed
        (a trial stopped early never counts: it did not train to the end)."""
        best = self._best()
        return None if best is None else best.hyperparameters.get_config()

    def best_trial_id(self) -> Optional[str]:
        """The id of the best completed trial, or None when none completed."""
        best = self._best()
        return None if best is None else best.trial_id

    def last_error(self) -> Optional[str]:
        """The error of the last trial that failed, if any."""
        failed = [r for r in self._results.values() if r.error]
        return failed[-1].error if failed else None
