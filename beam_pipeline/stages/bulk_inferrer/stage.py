"""The BulkInferrer stage's declaration: new raw examples scored by a model, as PredictionLogs.

``--infer_data PATTERN`` names the examples (CSV or TFRecord, read by ExampleGen's readers
with the run's schema); ``--infer_model`` which model scores them: this run's when the
Evaluator blessed it (``blessed``, the default), the pipeline's newest blessed model from
the metadata store (``latest_blessed``) or a SavedModel folder. The work (a Beam job with
``RunInference``, rows read = rows scored + rows rejected) is
:mod:`beam_pipeline.stages.bulk_inferrer.executor`, imported when a hook runs.

Example::

    python -m beam_pipeline --data=train.csv --module_file=m.py --infer_data='new/*.csv'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.engine.artifacts import Model, ModelBlessing, Schema, TypedArtifact
from beam_pipeline.engine.config import check_int
from beam_pipeline.engine.stage import Input, Preflight, Stage, StageContext
from beam_pipeline.stages.bulk_inferrer.artifacts import (
    InferenceRejectedRows,
    InferenceResult,
    InferredExamples,
)

__all__ = ["BulkInferrerConfig", "BulkInferrerStage"]


@dataclasses.dataclass(frozen=True)
class BulkInferrerConfig:
    """Settings of the BulkInferrer stage (scoring new data with a model)."""

    data: str = setting(
        "",
        flag="infer_data",
        help="CSV or TFRecord file, folder or glob of new examples to score (PredictionLogs).",
        path=True,
        worker_path=True,
    )
    model: str = setting(
        "blessed",
        flag="infer_model",
        help="blessed (this run's model if blessed, the default), latest_blessed (the "
        "pipeline's newest blessed model) or a SavedModel folder.",
        worker_path=True,
        keywords=("blessed", "latest_blessed"),
    )
    max_batch_size: int = setting(
        1024,
        flag="infer_max_batch_size",
        help="Most examples per model call (default 1024).",
        kind="int",
    )
    output_examples: bool = setting(
        False,
        flag="infer_output_examples",
        help="Also write the examples with the predictions joined as features.",
        kind="switch",
    )

    def __post_init__(self):
        check_int("infer_max_batch_size", self.max_batch_size, 1)
        if not self.model:
            raise PipelineError(
                "--infer_model is empty; pass blessed, latest_blessed or a SavedModel folder."
            )


class BulkInferrerStage(Stage):
    """Model (+ ModelBlessing, Schema) + --infer_data -> InferenceResult (+ the rejected rows
    and the joined examples)."""

    name = "BulkInferrer"
    description = (
        "optional (`--infer_data`): new rows scored by the blessed model as `PredictionLog`s: "
        "its own Beam job"
    )
    Config = BulkInferrerConfig
    config_key = "bulk_inferrer"
    inputs = (
        Input(Model, key="model", optional=True),
        Input(ModelBlessing, key="blessing", optional=True),
        Input(Schema, key="schema", optional=True),
    )
    outputs = (InferenceRejectedRows, InferenceResult, InferredExamples)
    # --infer_data is read as ExampleGen reads --data; typed by a --schema without a Schema.
    reads = ("data", "schema.file")

    def preflight(self, run: Preflight) -> None:
        from beam_pipeline.stages.bulk_inferrer import executor
        from beam_pipeline.stages.common.csv_input import csv_format

        # The new examples and the model, checked now rather than after the training.
        executor.check_infer_inputs(run.config, csv_format(run.config.data))

    def skip_reason(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact]
    ) -> str:
        return "" if ctx.config.bulk_inferrer.data else "no --infer_data"

    def parameters(self, ctx: StageContext) -> dict[str, Any]:
        from beam_pipeline.stages.bulk_inferrer import executor

        return executor.parameters(ctx)
