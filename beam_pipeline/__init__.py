"""beam-pipeline: a TFX-style ML pipeline (ExampleGen, statistics, schema, validation,
tf.Transform, tuning, training, evaluation, push, batch scoring) run as Apache Beam work on
any Beam runner.

From the command line::

    python -m beam_pipeline --runner=DirectRunner

From Python (:mod:`beam_pipeline.api`; the same settings as the flags)::

    import beam_pipeline as bp

    summary = bp.run(bp.make_config(data="data/*.csv", module_file="my_module.py"))

Importing the package loads nothing else: each name below is imported on first use, so
that ``--help`` and the ``runs`` commands stay fast.
"""

from typing import Any

__all__ = [
    "make_config",
    "run",
    "PipelineConfig",
    "PipelineError",
    "RunEvents",
    "RunSummary",
    "STAGE_GRAPH",
]

# Name -> the module that defines it.
_API = {
    "make_config": "beam_pipeline.api",
    "run": "beam_pipeline.api",
    "STAGE_GRAPH": "beam_pipeline.api",
    "PipelineConfig": "beam_pipeline.engine.config",
    "PipelineError": "beam_pipeline.core.errors",
    "RunEvents": "beam_pipeline.engine.events",
    "RunSummary": "beam_pipeline.engine.summary",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name not in _API:
        raise AttributeError(f"module 'beam_pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(_API[name]), name)
