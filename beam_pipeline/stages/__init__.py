"""The stages of a run as typed units, their graph, and the runner loop that runs them.

- :mod:`~beam_pipeline.stages.base`: what a stage declares (inputs, outputs, parameters)
  and its one ``run``;
- :mod:`~beam_pipeline.stages.graph`: the stages in dependency order;
- :mod:`~beam_pipeline.stages.runner`: looks each stage up, runs it in staging folders,
  publishes, times, reports and records it;
- :mod:`~beam_pipeline.stages.execution`: what is recorded, and the records' interface
  (the run manifest today, a metadata store later);
- one module per stage: ``example_gen``, ``schema``, ``validation``, ``transform``,
  ``tuner``, ``trainer``.

The graph (which imports every stage's module, Beam and TensorFlow Transform with them) is
not imported here, so that a records implementation can import :class:`Execution` cheaply.

Example::

    from beam_pipeline.stages.graph import STAGE_GRAPH

    run_stages(STAGE_GRAPH, ctx, manifest, summary)
"""

from beam_pipeline.stages.base import (
    Input,
    Outputs,
    Stage,
    StageContext,
    StageFailed,
    StageName,
    StageResult,
)
from beam_pipeline.stages.execution import Execution, ExecutionRecords, cache_key
from beam_pipeline.stages.runner import run_stages

__all__ = [
    "Input",
    "Outputs",
    "Stage",
    "StageContext",
    "StageFailed",
    "StageName",
    "StageResult",
    "Execution",
    "ExecutionRecords",
    "cache_key",
    "run_stages",
]
