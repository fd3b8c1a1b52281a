"""What a Beam job counted: its steps' counters in the project's metrics namespace, when
it ends (:func:`job_counters`) and, where its runner reports them, while it runs
(:func:`live_counters`, the progress display's rows and rows/s).

Which runners report counters while a job runs (Beam 2.77, as pinned):

- DataflowRunner: yes. ``result.metrics()`` asks the Dataflow API on every query until the
  job ends; a running job's values are the *attempted* ones (a retried bundle counts twice
  until the service settles it).
- A Beam job service (PortableRunner, FlinkRunner, SparkRunner) answers ``GetJobMetrics``
  at any time, but Beam's own services fill it only when the job ends: the embedded
  service (``--job_endpoint=embed``) keeps no result until its FnApiRunner returns, and
  the Java job server (Flink, Spark) copies the metrics of the result its runner returns,
  which Flink's and Spark's runners return once the job has finished (Flink's in detached
  mode reports no metrics at all). It is polled anyway, so a service that does report
  while the job runs shows; Beam's show nothing until the end. Polled through the
  service, not ``result.metrics()``: Beam's portable result keeps the first answer it
  got, so a poll while the job runs would hide the final counters from the stage.
- DirectRunner (the FnApiRunner): no. ``pipeline.run()`` returns only when the job has
  ended; in ``in_memory`` mode each bundle runs synchronously in the runner's thread (a
  progress request could only be sent after the bundle is done) and in
  ``multi_processing`` mode Beam's progress requests (``progress_request_frequency``) keep
  the workers' answers in a private object of each bundle, with no callback: reaching them
  means replacing Beam's private classes, which this project does not do.

Example::

    result = run_pipeline(p, "Trainer", timeout)
    poll = live_counters(result, options)   # None on the DirectRunner
    result.wait_until_finish()
    job_counters(result)      # {"trainer.jobs": 1, "trainer.steps_trained": 200, ...}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from apache_beam.metrics.metric import MetricsFilter

from beam_pipeline.runtime.runners import RunnerFamily, runner_family
from transforms.metrics import NAMESPACE

__all__ = ["job_counters", "live_counters"]


def job_counters(result) -> dict[str, int]:
    """The committed counters of ``result``'s job in :data:`transforms.metrics.NAMESPACE`.

    Args:
      result: a finished job's ``PipelineResult``.

    Returns:
      counter name to value; empty for runners that keep no metrics.
    """
    try:
        query = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
        return {c.key.metric.name: int(c.committed or 0) for c in query["counters"]}
    except (AttributeError, NotImplementedError, KeyError):  # runners without metrics
        return {}


def _latest(metrics) -> dict[str, int]:
    """Counter name to its latest value (attempted, else committed) summed over steps."""
    if metrics is None:
        return {}
    out: dict[str, int] = {}
    for c in metrics.query(MetricsFilter().with_namespace(NAMESPACE))["counters"]:
        value = c.attempted if c.attempted is not None else c.committed
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + int(value or 0)
    return out


def _from_job_service(result) -> dict[str, int]:
    from apache_beam.portability.api import beam_job_api_pb2
    from apache_beam.runners.portability.portable_runner import PortableMetrics

    # Beam's portable PipelineResult keeps its service and job id only privately (and
    # caches result.metrics(): see the module's docstring).
    service, job_id = result._job_service, result._job_id  # pylint: disable=protected-access
    response = service.GetJobMetrics(beam_job_api_pb2.GetJobMetricsRequest(job_id=job_id))
    return _latest(PortableMetrics(response))


def live_counters(result, options) -> Optional[Callable[[], dict[str, int]]]:
    """A function that reads a running job's counters, or None where its runner reports
    none before the job ends (see the module's docstring).

    The function returns counter name to value, empty while the runner has reported
    nothing yet; it never raises (a failed poll is an empty answer: progress never fails
    a run). It calls the runner's service each time: call it every few seconds.

    Args:
      result: what ``pipeline.run()`` returned (through ``run_pipeline``).
      options: the job's ``PipelineOptions``.
    """
    from apache_beam.options.pipeline_options import TestOptions

    family = runner_family(options)
    if options.view_as(TestOptions).dry_run:
        return None
    if family is RunnerFamily.DATAFLOW:

        def read() -> dict[str, int]:
            return _latest(result.metrics())

    elif family is RunnerFamily.PORTABLE and hasattr(result, "_job_service"):

        def read() -> dict[str, int]:
            return _from_job_service(result)

    else:
        return None

    def poll() -> dict[str, int]:
        try:
            return read()
        except Exception:  # noqa: BLE001  a service that does not answer now: nothing new
            return {}

    return poll
