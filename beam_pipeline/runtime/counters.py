"""What a finished Beam job counted: its steps' counters in the project's metrics namespace.

Example::

    result = run_pipeline(p, "Trainer", timeout)
    result.wait_until_finish()
    job_counters(result)      # {"trainer.jobs": 1, "trainer.steps_trained": 200, ...}
"""

from __future__ import annotations

from apache_beam.metrics.metric import MetricsFilter

from transforms.metrics import NAMESPACE

__all__ = ["job_counters"]


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
