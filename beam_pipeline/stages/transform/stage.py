"""The Transform stage's declaration: tf.Transform analyzes the train split and transforms
every split (needs a module file with ``preprocessing_fn``).

The job, its analyzer cache and its report are
:mod:`beam_pipeline.stages.transform.executor`, imported when :meth:`TransformStage.run` runs.

Example::

    python -m beam_pipeline --data=train.csv --module_file=m.py --no_analyzer_cache
"""

from __future__ import annotations

import dataclasses

from beam_pipeline.core.settings import setting
from beam_pipeline.engine.artifacts import (
    Examples,
    Schema,
    TransformedExamples,
    TransformGraph,
)
from beam_pipeline.engine.stage import Input, Stage, StageContext

__all__ = ["TransformConfig", "TransformStage"]


@dataclasses.dataclass(frozen=True)
class TransformConfig:
    """tf.Transform settings."""

    analyzer_cache: bool = setting(
        True,
        flag="analyzer_cache",
        help="Do not reuse or write tf.Transform's analyzer cache.",
        kind="switch",
    )


class TransformStage(Stage):
    """Examples + Schema -> TransformGraph + TransformedExamples (needs a module file)."""

    name = "Transform"
    description = (
        "tf.Transform with the module's `preprocessing_fn`; analyzer cache across runs: Beam job 2"
    )
    Config = TransformConfig
    config_key = "transform"
    in_run_identity = True
    worker_modules = ("transforms.transform",)
    inputs = (Input(Examples, key="examples"), Input(Schema, key="schema"))
    outputs = (TransformGraph, TransformedExamples)

    def parameters(self, ctx: StageContext) -> dict:
        # Only the code preprocessing_fn runs: a changed run_fn does not rerun Transform.
        return {"preprocessing_fn": ctx.transform_code()}
