"""The generic run machinery: what a stage is, the runner loop, and what a run records.

It imports no stage: the stages (:mod:`beam_pipeline.stages`) build on it.

- :mod:`~beam_pipeline.engine.stage`: what a stage declares and its one ``run``;
- :mod:`~beam_pipeline.engine.runner`: looks each stage up, runs it in staging folders,
  publishes, times, reports and records it;
- :mod:`~beam_pipeline.engine.execution`: what is recorded, and the records' interface;
- :mod:`~beam_pipeline.engine.records`: those records in the run manifest and the store;
- :mod:`~beam_pipeline.engine.manifest`, :mod:`~beam_pipeline.engine.run_dir`: a run's
  identity, resume and folder; :mod:`~beam_pipeline.engine.artifacts`,
  :mod:`~beam_pipeline.engine.contents`, :mod:`~beam_pipeline.engine.fingerprint`: typed
  artifacts, what they hold, content digests; :mod:`~beam_pipeline.engine.summary`: the
  run's summary rows.
"""

from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.engine.execution import Execution, ExecutionRecords, cache_key
from beam_pipeline.engine.runner import run_stages
from beam_pipeline.engine.stage import (
    Input,
    Outputs,
    Preflight,
    Stage,
    StageContext,
    StageFailed,
    StageResult,
)

__all__ = [
    "PipelineConfig",
    "Input",
    "Preflight",
    "Outputs",
    "Stage",
    "StageContext",
    "StageFailed",
    "StageResult",
    "Execution",
    "ExecutionRecords",
    "cache_key",
    "run_stages",
]
