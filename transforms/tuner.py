"""``RunTrials`` (a round of a search, a trial per element) and ``RunSearch`` (a whole search).

``RunSearch`` is the ``search_job`` schedule's one job: a long-lived loop per slot, each on
its own worker, claiming trials from the search's shared state (see
:mod:`trainer.tuning.search_loop`) until the oracle is done. ``RunTrials``, for the
``rounds`` and ``rolling`` schedules, is one round or one trial:

The round's :class:`trainer.tuning.TrialSpec` elements are created, ``Reshuffle``d (so each
trial can land on its own worker, and a retried worker reruns its trial alone) and run by a
DoFn that calls :class:`trainer.tuning.TrialRunner` (the module's ``tuner_fn`` once per
worker process and search, then the tuner's ``run_trial`` per trial). The DoFn carries the
``accelerator`` / ``min_ram`` resource hints when they are set, so on Dataflow trials get
GPU workers while the launcher keeps the oracle.

A trial's error does not fail the step: it is the trial's result (status INVALID or
FAILED, with the error text), so the other trials go on; the oracle decides what it means.

Example::

    with create_pipeline(options) as p:
        runners = shared.Shared()   # one per search: workers keep their tuner across rounds
        results = p | "RunTrials" >> RunTrials(job, specs, min_ram="8GB", runners=runners)
        # or the whole search, two loops:
        results = p | "RunSearch" >> RunSearch(job, state_path(project_dir), 2)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Optional

import apache_beam as beam
from apache_beam.utils import shared

from beam_pipeline.core.errors import PipelineError
from trainer.tuning import (
    DEFAULT_LEASE_SECONDS,
    SearchLoop,
    TrialResult,
    TrialRunner,
    TrialSpec,
    TrialStatus,
    TuningJob,
)
from transforms.hints import resource_hints
from transforms.metrics import NAMESPACE

__all__ = ["RunSearch", "RunTrials"]


@beam.typehints.with_input_types(TrialSpec)
@beam.typehints.with_output_types(TrialResult)
class _RunTrialDoFn(beam.DoFn):
    """Runs trials with one :class:`TrialRunner` per DoFn instance; counts their outcomes."""

    def __init__(self, job: TuningJob, runners: Optional[shared.Shared]) -> None:
        self._job = job
        self._runners = runners
        self._trials = beam.metrics.Metrics.counter(NAMESPACE, "tuner.trials_run")
        self._completed = beam.metrics.Metrics.counter(NAMESPACE, "tuner.trials_completed")
        self._failed = beam.metrics.Metrics.counter(NAMESPACE, "tuner.trials_failed")
        self._stopped = beam.metrics.Metrics.counter(NAMESPACE, "tuner.trials_stopped")
        self._reused = beam.metrics.Metrics.counter(NAMESPACE, "tuner.trials_reused")
        self._millis = beam.metrics.Metrics.distribution(NAMESPACE, "tuner.trial_millis")
        self._runner: Optional[TrialRunner] = None

    def setup(self) -> None:
        # Caps TF's thread pools before any op runs in this worker; the module and its
        # tuner_fn load on the first trial. With a Shared handle, a process that served an
        # earlier round of the same search keeps its runner (and its loaded tuner).
        if self._runners is None:
            self._runner = TrialRunner(self._job)
        else:
            job = self._job
            self._runner = self._runners.acquire(lambda: TrialRunner(job), tag=job.tuner_dir)

    def process(self, spec: TrialSpec) -> Iterator[TrialResult]:
        assert self._runner is not None  # set in setup()
        result = self._runner.run(spec)
        self._count(result)
        yield result

    def _count(self, result: TrialResult) -> None:
        self._trials.inc()
        if result.reused:
            self._reused.inc()
        elif result.status is TrialStatus.COMPLETED:
            self._completed.inc()
            self._millis.update(int(result.seconds * 1000))
        elif result.status is TrialStatus.STOPPED:  # early stopping ended it: not a failure
            self._stopped.inc()
        else:
            self._failed.inc()


class RunTrials(beam.PTransform[beam.pvalue.PBegin, beam.PCollection[TrialResult]]):
    """Runs one round's trials on workers; the output holds one :class:`TrialResult` per trial.

    Args:
      job: what every trial needs (module source, data, shared tuner folder).
      trials: this round's trials.
      accelerator: Beam accelerator hint, e.g. ``type:nvidia-l4;count:1;install-nvidia-driver``.
      min_ram: Beam min_ram hint, e.g. ``16GB``.
      runners: one ``apache_beam.utils.shared.Shared`` handle for all rounds of a search:
        a worker process that ran a trial of an earlier round reuses its loaded module and
        tuner instead of calling ``tuner_fn`` again (per process; Beam's mechanism for
        sharing an object between DoFn instances).

    Raises:
      PipelineError: no trials, or a hint value Beam cannot parse.
    """

    def __init__(
        self,
        job: TuningJob,
        trials: Sequence[TrialSpec],
        accelerator: Optional[str] = None,
        min_ram: Optional[str] = None,
        runners: Optional[shared.Shared] = None,
    ) -> None:
        super().__init__()
        if not trials:
            raise PipelineError("RunTrials was given no trials; ask the oracle for a round first.")
        self._job = job
        self._trials = list(trials)
        self._runners = runners
        self._hints = resource_hints("tuner", accelerator, min_ram)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[TrialResult]:
        run = beam.ParDo(_RunTrialDoFn(self._job, self._runners))
        if self._hints:
            run = run.with_resource_hints(**self._hints)
        trials = pbegin | "CreateTrials" >> beam.Create(self._trials)
        if len(self._trials) > 1:  # one trial needs no spreading (a rolling search's job)
            trials = trials | "Reshuffle" >> beam.Reshuffle()
        return trials | "RunTrial" >> run


@beam.typehints.with_input_types(int)
@beam.typehints.with_output_types(TrialResult)
class _SearchLoopDoFn(_RunTrialDoFn):
    """One slot's long-lived loop: claims, runs and reports trials until the search is over."""

    def __init__(
        self,
        job: TuningJob,
        state_path: str,
        lease_seconds: float,
        runners: Optional[shared.Shared],
    ) -> None:
        super().__init__(job, runners)
        self._state_path = state_path
        self._lease_seconds = lease_seconds

    def process(self, slot: int) -> Iterator[TrialResult]:  # type: ignore[override]
        assert self._runner is not None  # set in setup()
        loop = SearchLoop(self._job, self._state_path, self._runner, self._lease_seconds)
        for result in loop.run(slot):
            self._count(result)
            yield result


class RunSearch(beam.PTransform[beam.pvalue.PBegin, beam.PCollection[TrialResult]]):
    """A whole search as one job: a long-lived loop per slot, each on its own worker.

    ``slots`` elements (the slot numbers) are created and ``Reshuffle``d so each lands on
    a worker of its own; each runs :class:`trainer.tuning.SearchLoop`, which claims the
    next trial from the search's shared state (a compare-and-swap document in the run's
    storage, created by the launcher), runs it and reports it, until the oracle is done.
    The output holds one :class:`TrialResult` per trial attempt a loop ran.

    Args:
      job: what every trial needs.
      state_path: the search's shared state (:func:`trainer.tuning.state_path`).
      slots: loops (trials that run at once); a list picks the slot numbers (a local
        pool's replacement job reruns a lost worker's slot).
      lease_seconds: how long a claimed trial stays its loop's without a renewal.
      accelerator / min_ram / runners: as :class:`RunTrials`.

    Raises:
      PipelineError: no slots, or a hint value Beam cannot parse.
    """

    def __init__(
        self,
        job: TuningJob,
        state_path: str,
        slots: int | Sequence[int],
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        accelerator: Optional[str] = None,
        min_ram: Optional[str] = None,
        runners: Optional[shared.Shared] = None,
    ) -> None:
        super().__init__()
        numbers = list(range(slots)) if isinstance(slots, int) else list(slots)
        if not numbers:
            raise PipelineError("RunSearch was given no slots; pass --tuner_parallel_trials >= 1.")
        self._job = job
        self._state_path = state_path
        self._slots = numbers
        self._lease_seconds = lease_seconds
        self._runners = runners
        self._hints = resource_hints("tuner", accelerator, min_ram)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[TrialResult]:
        loop = beam.ParDo(
            _SearchLoopDoFn(self._job, self._state_path, self._lease_seconds, self._runners)
        )
        if self._hints:
            loop = loop.with_resource_hints(**self._hints)
        slots = pbegin | "CreateSlots" >> beam.Create(self._slots)
        if len(self._slots) > 1:  # a worker per slot
            slots = slots | "Reshuffle" >> beam.Reshuffle()
        return slots | "SearchLoop" >> loop
