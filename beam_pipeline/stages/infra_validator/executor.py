"""The InfraValidator's work (TFX's ``executor.py``): up to 64 raw examples of the eval
split taken as request material, the model served by
:func:`beam_pipeline.stages.infra_validator.checks.validate_model` (a sandbox process, or the
TF Serving server at ``--serving_endpoint``), ``infra_blessing/`` published and, on success,
TF Serving's warm-up file added to the model (``assets.extra/``).

It reads the model and the examples the Evaluator reads and nothing the Evaluator makes, so
the two run at the same time (the Pusher waits for both). The warm-up file it adds to the
model folder is not read by the Evaluator's model loads (TensorFlow's loader reads
``saved_model.pb``, ``variables/`` and ``assets/`` only) and is written under a temporary
name, then renamed.

Imported only when the stage runs: the declaration (``stage.py``) stays light for ``--help``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import Examples, InfraBlessing, Model, TypedArtifact
from beam_pipeline.engine.stage import Outputs, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus

if TYPE_CHECKING:
    from beam_pipeline.engine.stage import Stage

__all__ = ["read_examples", "run"]

_MAX_EXAMPLES = 64


def read_examples(pattern: str, limit: int = _MAX_EXAMPLES) -> list[bytes]:
    """Up to ``limit`` serialized tf.Examples of the (gzip) TFRecord files at ``pattern``."""
    import tensorflow as tf

    files = sorted(fileio.glob(pattern))
    if not files:
        return []
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return [r.numpy() for r in itertools.islice(records, limit)]


def run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    out: Outputs,
) -> StageResult:
    """The stage's run: Model + Examples -> InfraBlessing."""
    from beam_pipeline.stages.infra_validator.checks import describe, validate_model

    e = ctx.config.infra_validator
    model = inputs[Model]
    examples = read_examples(inputs[Examples].file_pattern(ctx.config.evaluator.eval_split))
    result = validate_model(
        model.uri,
        examples,
        load_timeout=e.load_timeout,
        endpoint=e.serving_endpoint,
        model_name=e.serving_model_name,
    )
    InfraBlessing(out.folder(InfraBlessing)).write(result)
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
