"""The Schema stage: the raw data's schema, inferred from the train statistics or given.

With ``--schema`` the user's schema is published as is; otherwise tfx-bsl infers it from
the train split's statistics (on the launcher: small protos).

Example::

    SchemaStage().run(ctx, {Statistics: statistics}, out)   # writes out.folder(Schema)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.core.types import Split
from beam_pipeline.engine.artifacts import SCHEMA_FILE, Schema, Statistics, TypedArtifact
from beam_pipeline.engine.config import PipelineConfig, check_int
from beam_pipeline.engine.fingerprint import file_digest
from beam_pipeline.engine.report_sections import ReportSection, ReportView
from beam_pipeline.engine.stage import Input, Outputs, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus

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
    Config = SchemaConfig
    config_key = "schema"
    inputs = (Input(Statistics, key="statistics"),)
    outputs = (Schema,)

    def prepare(self, config: PipelineConfig, options: Any) -> Any:
        """The ``--schema`` proto (read and checked now, before anything is written), or
        None: the schema is inferred."""
        from beam_pipeline.stages.common.schema_file import user_schema

        return user_schema(config)

    def parameters(self, ctx: StageContext) -> dict:
        data = ctx.config.schema
        return {
            "schema_file": file_digest(data.file) if data.file else None,
            "infer_feature_shape": data.infer_feature_shape,
            "max_string_domain_size": data.max_string_domain_size,
        }

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        from beam_pipeline.stages.schema.inference import infer_schema, write_schema
        from transforms.statistics import read_statistics

        data = ctx.config.schema
        given = ctx.prepared(self)
        if given is not None:
            schema, how = given, f"from --schema {data.file}"
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
        return StageResult([report], outputs=(artifact,), outcome={"schema_file": artifact.file})

    def check(self, ctx: StageContext, outcome: Mapping[str, Any]) -> None:
        """Refuses an ``--eval_slice_features`` name that is no feature, now that the
        schema is known: before Transform, tuning and training, not when the Evaluator
        starts after them."""
        e = ctx.config.evaluator
        if e.enabled and e.slice_features and outcome.get("schema_file"):
            check_slice_features(e.slice_features, outcome["schema_file"], ctx.preprocessing_fn)

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """Each feature's type, presence, shape and domain."""
        from beam_pipeline.stages.schema.report import schema_section

        return [schema_section(view)]


def _transformed_names(schema, preprocessing_fn) -> set[str]:
    """The names preprocessing_fn outputs, from tf.Transform's own trace of it (a fraction
    of a second, no Beam job); none when it does not trace (the Transform says why)."""
    import tempfile

    from tensorflow_transform import impl_helper
    from tensorflow_transform.tf_metadata import schema_utils

    try:
        specs = impl_helper.get_type_specs_from_feature_specs(
            schema_utils.schema_as_feature_spec(schema).feature_spec
        )
        with tempfile.TemporaryDirectory() as tmp:
            _, _, outputs = impl_helper.trace_preprocessing_function(
                preprocessing_fn, specs, use_tf_compat_v1=False, base_temp_dir=tmp
            )
    except Exception:  # noqa: BLE001  the user's function: the Transform stage reports it
        return set()
    return set(outputs)


def check_slice_features(names: Sequence[str], schema_file: str, preprocessing_fn) -> None:
    """Every name is a feature of the data (the schema) or an output of preprocessing_fn.

    Raises:
      PipelineError: naming the first that is neither, the closest feature and the choices.
    """
    import difflib

    from beam_pipeline.stages.common.schema_file import read_schema

    schema = read_schema(schema_file)
    raw = {f.name for f in schema.feature}
    unknown = [n for n in names if n not in raw]
    if not unknown:
        return
    known = raw | (_transformed_names(schema, preprocessing_fn) if preprocessing_fn else set())
    for name in unknown:
        if name in known:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise PipelineError(
            f"--eval_slice_features names {name!r}, which is neither a feature of the data "
            f"({schema_file}) nor an output of preprocessing_fn; {hint}Slice on one of "
            f"{', '.join(sorted(known))}."
        )
