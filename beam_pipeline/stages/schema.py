"""The Schema stage: the raw data's schema, inferred from the train statistics or given.

With ``--schema`` the user's schema is published as is; otherwise tfx-bsl infers it from
the train split's statistics (on the launcher: small protos).

Example::

    SchemaStage().run(ctx, {Statistics: statistics}, out)   # writes out.folder(Schema)
"""

from __future__ import annotations

from collections.abc import Mapping

from beam_pipeline.artifacts import SCHEMA_FILE, Schema, Statistics, TypedArtifact
from beam_pipeline.core import fileio
from beam_pipeline.core.types import Split
from beam_pipeline.fingerprint import file_digest
from beam_pipeline.stages.base import Input, Outputs, Stage, StageContext, StageName, StageResult
from beam_pipeline.summary import StageReport, StageStatus

__all__ = ["SchemaStage"]


class SchemaStage(Stage):
    """Statistics -> Schema."""

    name = StageName.SCHEMA
    inputs = (Input(Statistics, key="statistics"),)
    outputs = (Schema,)

    def parameters(self, ctx: StageContext) -> dict:
        data = ctx.config.data
        return {
            "schema_file": file_digest(data.schema) if data.schema else None,
            "infer_feature_shape": data.infer_feature_shape,
            "max_string_domain_size": data.max_string_domain_size,
        }

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        from beam_pipeline.schema_gen import infer_schema, write_schema
        from transforms.statistics import read_statistics

        data = ctx.config.data
        if ctx.user_schema is not None:
            schema, how = ctx.user_schema, f"from --schema {data.schema}"
        else:
            train = read_statistics(inputs[Statistics].path(Split.TRAIN))
            schema = infer_schema(
                train,
                infer_feature_shape=data.infer_feature_shape,
                max_string_domain_size=data.max_string_domain_size,
            )
            how = "inferred from the train statistics"
        write_schema(schema, fileio.join(out.folder(Schema), SCHEMA_FILE))
        artifact = out.artifact(Schema, features=len(schema.feature))
        report = StageReport(
            "Schema",
            StageStatus.OK,
            artifact=artifact.file,
            note=f"{len(schema.feature)} features, {how}",
        )
        return StageResult([report], outputs=(artifact,))
