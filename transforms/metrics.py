"""One Beam metrics namespace for every stage's row counters.

Example::

    rows_read = beam.metrics.Metrics.counter(NAMESPACE, "example_gen.rows_read")
"""

from __future__ import annotations

__all__ = ["NAMESPACE"]

NAMESPACE = "beam_pipeline"
