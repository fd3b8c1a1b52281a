"""``TrainModel``: the training step, one :class:`trainer.TrainingJob` through one DoFn.

The DoFn carries Beam resource hints (``accelerator``, ``min_ram``) when they are set, so
on Dataflow the step gets its own (GPU) worker pool while the data steps keep theirs; on
the DirectRunner it runs in a worker of the local runner. A ``Reshuffle`` keeps the step
out of the creating stage, so a retry (preemption) reruns the training step alone, which
then resumes from the checkpoints in ``model_run_dir``.

A user error (bad module, failed export) does not raise: no retry would help, so the step
emits a :class:`trainer.TrainingResult` with ``error`` set, and the caller reports it.

With ``workers`` above 1 (``--train_workers``), the ranks of a multi-worker training
(:mod:`trainer.multiworker`) run either as that many elements, one per worker
(``per_element``: Dataflow gives each its own VM, with the hints), or all from the one
element, each rank in a process of its own (the DirectRunner and the portable runners,
which would run the elements of one bundle one after the other: rank 0 would wait for
rank 1 forever). The chief's result is the step's one output.

Example::

    with create_pipeline(options) as p:
        results = p | "Train" >> TrainModel(
            job, accelerator="type:nvidia-l4;count:1;install-nvidia-driver", min_ram="16GB")
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import apache_beam as beam

from beam_pipeline.core.errors import PipelineError
from trainer import TrainingJob, TrainingResult, run_trainer
from trainer.isolation import run_isolated
from trainer.multiworker import WorkerSettings, train_rank
from transforms.hints import resource_hints
from transforms.metrics import NAMESPACE

__all__ = ["TrainModel"]


@beam.typehints.with_input_types(TrainingJob)
@beam.typehints.with_output_types(TrainingResult)
class _TrainDoFn(beam.DoFn):
    """Runs :func:`trainer.run_trainer` on one job; counts jobs, reuses, errors and steps.

    The job runs in a process of its own (:func:`trainer.isolation.run_isolated`), on every
    runner: an exit call or a crash in ``run_fn`` ends that process, not the worker (on the
    DirectRunner, the launcher), and becomes the job's error, as does a ``run_fn`` that
    runs past ``timeout`` seconds.
    """

    def __init__(self, timeout: Optional[float] = None) -> None:
        self._timeout = timeout
        self._jobs = beam.metrics.Metrics.counter(NAMESPACE, "trainer.jobs")
        self._reused = beam.metrics.Metrics.counter(NAMESPACE, "trainer.jobs_reused")
        self._errors = beam.metrics.Metrics.counter(NAMESPACE, "trainer.user_errors")
        self._steps = beam.metrics.Metrics.counter(NAMESPACE, "trainer.steps_trained")
        self._replicas = beam.metrics.Metrics.gauge(NAMESPACE, "trainer.replicas")

    def process(self, job: TrainingJob) -> Iterator[TrainingResult]:
        self._jobs.inc()
        try:
            result = run_isolated(
                run_trainer,
                (job,),
                what=f"The training code of {job.module_file}",
                timeout=self._timeout,
                timeout_flag="--trainer_timeout",
                name="trainer",
            )
        except PipelineError as e:
            self._errors.inc()
            yield TrainingResult.failed(job, str(e))
            return
        if result.reused:
            self._reused.inc()
        elif result.final_step is not None:
            self._steps.inc(result.final_step - (result.start_step or 0))
        self._replicas.set(result.num_replicas)
        yield result


def _train_ranks(job: TrainingJob, ranks: list[int], settings: WorkerSettings):
    """Runs ``ranks`` of a multi-worker training, each in a thread of its own (its
    attempts run in processes of their own); the chief's result, or the first error."""
    import threading

    results: dict[int, object] = {}

    def run(rank: int) -> None:
        try:
            results[rank] = train_rank(job, rank, settings)
        except PipelineError as e:
            results[rank] = e

    threads = [threading.Thread(target=run, args=(r,), name=f"rank-{r}") for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    chief = results.get(0)
    if isinstance(chief, TrainingResult):
        return chief  # the model is whole, whatever a rank did after the chief's export
    errors = [results[r] for r in ranks if isinstance(results.get(r), PipelineError)]
    if errors:
        raise errors[0]
    return None


@beam.typehints.with_output_types(TrainingResult)
class _TrainRanksDoFn(beam.DoFn):
    """Runs the ranks an element names (one rank, or all) of a multi-worker training;
    emits the chief's :class:`TrainingResult` (an error as the result's ``error``)."""

    def __init__(self, job: TrainingJob, settings: WorkerSettings) -> None:
        self._job = job
        self._settings = settings
        self._errors = beam.metrics.Metrics.counter(NAMESPACE, "trainer.user_errors")
        self._steps = beam.metrics.Metrics.counter(NAMESPACE, "trainer.steps_trained")
        self._replicas = beam.metrics.Metrics.gauge(NAMESPACE, "trainer.replicas")

    def process(self, ranks: list[int]) -> Iterator[TrainingResult]:
        try:
            result = _train_ranks(self._job, ranks, self._settings)
        except PipelineError as e:
            if 0 in ranks:  # one error, from the chief's element
                self._errors.inc()
                yield TrainingResult.failed(self._job, str(e))
            return
        if result is None:
            return
        if result.final_step is not None and not result.reused:
            self._steps.inc(result.final_step - (result.start_step or 0))
        self._replicas.set(result.num_replicas)
        yield result


class TrainModel(beam.PTransform[beam.pvalue.PBegin, beam.PCollection[TrainingResult]]):
    """Trains one model on a worker; the output holds its one :class:`TrainingResult`.

    Args:
      job: what to train (plain values; see :class:`trainer.TrainingJob`).
      accelerator: Beam accelerator hint, e.g. ``type:nvidia-l4;count:1;install-nvidia-driver``.
      min_ram: Beam min_ram hint, e.g. ``16GB``.
      timeout: seconds the training may run before it is stopped and fails (None: no limit).
      workers: workers training together (``--train_workers``); 1: one, as ever.
      per_element: with several workers, one element per rank (a job of ``workers``
        elements, each on a worker of its own); else one element that runs all ranks.
      retries / rendezvous_timeout: see :class:`trainer.multiworker.WorkerSettings`.

    Raises:
      PipelineError: a hint value Beam cannot parse.
    """

    def __init__(
        self,
        job: TrainingJob,
        accelerator: Optional[str] = None,
        min_ram: Optional[str] = None,
        timeout: Optional[float] = None,
        *,
        workers: int = 1,
        per_element: bool = False,
        retries: int = 2,
        rendezvous_timeout: float = 300.0,
    ) -> None:
        super().__init__()
        self._job = job
        self._timeout = timeout
        self._hints = resource_hints("trainer", accelerator, min_ram)
        self._workers = workers
        self._per_element = per_element
        self._settings = WorkerSettings(workers, retries, rendezvous_timeout, timeout)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[TrainingResult]:
        if self._workers == 1:
            train = beam.ParDo(_TrainDoFn(self._timeout))
            elements = [self._job]
        else:
            train = beam.ParDo(_TrainRanksDoFn(self._job, self._settings))
            ranks = list(range(self._workers))
            elements = [[r] for r in ranks] if self._per_element else [ranks]
        if self._hints:
            train = train.with_resource_hints(**self._hints)
        return (
            pbegin
            | "CreateJob" >> beam.Create(elements)
            | "Reshuffle" >> beam.Reshuffle()
            | "Train" >> train
        )
