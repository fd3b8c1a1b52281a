"""The InfraValidator stage: the model served from a sandbox process (or by the TF Serving
server at ``--serving_endpoint``) before it is pushed.

The work is :func:`beam_pipeline.stages.infra_validator.checks.validate_model`; this unit
takes up to 64 raw examples of the eval split as request material, publishes
``infra_blessing/`` and, on success, the model carries TF Serving's warm-up file
(``assets.extra/``). It reads the model and the examples the Evaluator reads and nothing
the Evaluator makes, so the two run at the same time (the Pusher waits for both). The
warm-up file it adds to the model folder is not read by the Evaluator's model loads
(TensorFlow's loader reads ``saved_model.pb``, ``variables/`` and ``assets/`` only) and is
written under a temporary name, then renamed.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import Examples, InfraBlessing, Model, TypedArtifact
from beam_pipeline.engine.stage import Input, Outputs, Stage, StageContext, StageName, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.evaluator.stage import skip_without_model

__all__ = ["InfraValidatorStage", "read_examples"]

_MAX_EXAMPLES = 64


def read_examples(pattern: str, limit: int = _MAX_EXAMPLES) -> list[bytes]:
    """Up to ``limit`` serialized tf.Examples of the (gzip) TFRecord files at ``pattern``."""
    import tensorflow as tf

    files = sorted(fileio.glob(pattern))
    if not files:
        return []
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return [r.numpy() for r in itertools.islice(records, limit)]


class InfraValidatorStage(Stage):
    """Model + Examples -> InfraBlessing (and the model's warm-up file)."""

    name = StageName.INFRA_VALIDATOR
    inputs = (Input(Model, key="model", optional=True), Input(Examples, key="examples"))
    outputs = (InfraBlessing,)

    def parameters(self, ctx: StageContext) -> dict:
        e = ctx.config.evaluator
        params = {"eval_split": e.eval_split.value, "load_timeout": e.infra_load_timeout}
        if e.serving_endpoint:  # only then: the sandbox's cache keys stay as they were
            params.update(endpoint=e.serving_endpoint, model_name=e.serving_model_name)
        return params

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        from beam_pipeline.stages.infra_validator.checks import (
            describe,
            validate_model,
            write_infra_result,
        )

        e = ctx.config.evaluator
        off = "" if e.infra_validator else "--no_infra_validator"
        skipped = skip_without_model("InfraValidator", inputs, off)
        if skipped is not None:
            return skipped
        model = inputs[Model]
        examples = read_examples(inputs[Examples].file_pattern(e.eval_split))
        result = validate_model(
            model.uri,
            examples,
            load_timeout=e.infra_load_timeout,
            endpoint=e.serving_endpoint,
            model_name=e.serving_model_name,
        )
        write_infra_result(out.folder(InfraBlessing), result)
        report = StageReport(
            "InfraValidator",
            StageStatus.OK,
            artifact=out.uri(InfraBlessing),
            note=describe(result),
            details=result.to_json(),
        )
        return StageResult(
            [report],
            outputs=(out.artifact(InfraBlessing, blessed=result.blessed),),
            outcome={"blessed": result.blessed},
        )
