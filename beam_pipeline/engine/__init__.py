"""The generic run machinery: what a stage is, the runner loop, and what a run records.

It imports no stage: the stages (:mod:`beam_pipeline.stages`) build on it.

- :mod:`~beam_pipeline.engine.stage`: what a stage declares and its one ``run``;
- :mod:`~beam_pipeline.engine.runner`: looks each stage up, runs it in staging folders,
  publishes, times, reports and records it;
- :mod:`~beam_pipeline.engine.execution`: what is recorded, and the records' interface;
- :mod:`~beam_pipeline.engine.run_records`: those records in the run manifest and the store;
- :mod:`~beam_pipeline.engine.manifest`, :mod:`~beam_pipeline.engine.run_dir`: a run's
  identity, resume and folder; :mod:`~beam_pipeline.engine.artifacts`,
  :mod:`~beam_pipeline.engine.contents`, :mod:`~beam_pipeline.engine.fingerprint`: typed
  artifacts, what they hold, content digests; :mod:`~beam_pipeline.engine.summary`: the
  run's summary rows; :mod:`~beam_pipeline.engine.history_entry`: what a stage shows in
  the run history.
"""

from typing import Any

__all__ = [
    "PipelineConfig",
    "Input",
    "InputData",
    "Preflight",
    "Outputs",
    "Stage",
    "StageContext",
    "StageFailed",
    "StageResult",
    "Started",
    "Execution",
    "ExecutionRecords",
    "cache_key",
    "run_stages",
]

# Name -> its module: imported on first use, so that importing one module of the engine
# (the config, for --help) does not import the runner.
_HOMES = {
    "PipelineConfig": "config",
    "Execution": "execution",
    "ExecutionRecords": "execution",
    "cache_key": "execution",
    "run_stages": "runner",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name not in __all__:
        raise AttributeError(f"module 'beam_pipeline.engine' has no attribute {name!r}")
    module = _HOMES.get(name, "stage")
    return getattr(importlib.import_module(f"beam_pipeline.engine.{module}"), name)
