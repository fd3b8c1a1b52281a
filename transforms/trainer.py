"""``TrainModel``: the training step, one :class:`trainer.TrainingJob` through one DoFn.

The DoFn carries Beam resource hints (``accelerator``, ``min_ram``) when they are set, so
on Dataflow the step gets its own (GPU) worker pool while the data steps keep theirs; on
the DirectRunner it runs in a worker of the local runner. A ``Reshuffle`` keeps the step
out of the creating stage, so a retry (preemption) reruns the training step alone, which
then resumes from the checkpoints in ``model_run_dir``.

A user error (bad module, failed export) does not raise: no retry would help, so the step
emits a :class:`trainer.TrainingResult` with ``error`` set, and the caller reports it.

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


class TrainModel(beam.PTransform[beam.pvalue.PBegin, beam.PCollection[TrainingResult]]):
    """Trains one model on a worker; the output holds its one :class:`TrainingResult`.

    Args:
      job: what to train (plain values; see :class:`trainer.TrainingJob`).
      accelerator: Beam accelerator hint, e.g. ``type:nvidia-l4;count:1;install-nvidia-driver``.
      min_ram: Beam min_ram hint, e.g. ``16GB``.
      timeout: seconds the training may run before it is stopped and fails (None: no limit).

    Raises:
      PipelineError: a hint value Beam cannot parse.
    """

    def __init__(
        self,
        job: TrainingJob,
        accelerator: Optional[str] = None,
        min_ram: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> None:
        super().__init__()
        self._job = job
        self._timeout = timeout
        self._hints = resource_hints("trainer", accelerator, min_ram)

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection[TrainingResult]:
        train = beam.ParDo(_TrainDoFn(self._timeout))
        if self._hints:
            train = train.with_resource_hints(**self._hints)
        return (
            pbegin
            | "CreateJob" >> beam.Create([self._job])
            | "Reshuffle" >> beam.Reshuffle()
            | "Train" >> train
        )
