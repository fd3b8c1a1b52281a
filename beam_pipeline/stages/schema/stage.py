"""The Schema stage's declaration: the raw data's schema, inferred from the train
statistics or given (the work: :mod:`beam_pipeline.stages.schema.executor`, imported when it
runs).

Example::

    SchemaStage().run(ctx, {Statistics: statistics}, out)   # writes out.folder(Schema)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core.settings import setting
from beam_pipeline.engine.artifacts import Schema, Statistics
from beam_pipeline.engine.config import PipelineConfig, check_int
from beam_pipeline.engine.stage import Input, Stage, StageContext

if TYPE_CHECKING:
    from beam_pipeline.engine.report_sections import ReportSection, ReportView

__all__ = ["SchemaConfig", "SchemaStage"]


@dataclasses.dataclass(frozen=True)
class SchemaConfig:
    """How the schema is inferred (or given)."""

    file: Optional[str] = setting(
        None,
        flag="schema",
        help="A schema.pbtxt to use instead of inferring one.",
        path=True,
        digest="file",
    )
    infer_feature_shape: bool = setting(
        True,
        flag="infer_feature_shape",
        help="Infer no fixed shapes: every feature a variable-length list in the schema.",
        kind="switch",
    )
    max_string_domain_size: int = setting(
        100,
        flag="max_string_domain_size",
        help="A string feature with more distinct values gets no domain in the schema.",
        kind="int",
    )

    def __post_init__(self):
        check_int("max_string_domain_size", self.max_string_domain_size, 0)


class SchemaStage(Stage):
    """Statistics -> Schema."""

    name = "Schema"
    description = "inferred from the train statistics, or `--schema`: launcher"
    Config = SchemaConfig
    config_key = "schema"
    inputs = (Input(Statistics, key="statistics"),)
    outputs = (Schema,)
    # check() refuses an --eval_slice_features name that no feature has, before training.
    reads = ("evaluator.enabled", "evaluator.slice_features")

    def prepare(self, config: PipelineConfig, options: Any) -> Any:
        """The ``--schema`` proto (read and checked now, before anything is written), or
        None: the schema is inferred."""
        given = config.schema.file
        return Schema.read_file(given) if given else None

    def parameters(self, ctx: StageContext) -> dict:
        from beam_pipeline.engine.fingerprint import file_digest

        data = ctx.config.schema
        return {
            "schema_file": file_digest(data.file) if data.file else None,
            "infer_feature_shape": data.infer_feature_shape,
            "max_string_domain_size": data.max_string_domain_size,
        }

    def check(self, ctx: StageContext, outcome: Mapping[str, Any]) -> None:
        """Refuses an ``--eval_slice_features`` name that is no feature, now that the
        schema is known: before Transform, tuning and training, not when the Evaluator
        starts after them."""
        names = ctx.config.evaluator.slice_features
        if ctx.config.evaluator.enabled and names and outcome.get("schema_file"):
            from beam_pipeline.stages.schema import executor

            # The module is loaded only for a name the data does not have (a rerun that
            # reuses every stage loads none).
            executor.check_slice_features(
                names, outcome["schema_file"], lambda: ctx.preprocessing_fn
            )

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """Each feature's type, presence, shape and domain."""
        from beam_pipeline.stages.schema.report import schema_section

        return [schema_section(view)]
