"""The Schema stage's work (TFX's ``executor.py``): the user's ``--schema`` published as is,
or the schema inferred by tfx-bsl from the train split's statistics (on the launcher: small
protos); and the check of ``--eval_slice_features`` against it.

Imported only when the stage runs: the declaration (``stage.py``) stays light for ``--help``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import Split
from beam_pipeline.engine.artifacts import SCHEMA_FILE, Schema, Statistics, TypedArtifact
from beam_pipeline.engine.stage import Outputs, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus

if TYPE_CHECKING:
    from beam_pipeline.engine.stage import Stage

__all__ = ["check_slice_features", "run"]


def run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    out: Outputs,
) -> StageResult:
    """The stage's run: Statistics -> Schema."""
    from beam_pipeline.stages.schema.inference import infer_schema, write_schema

    data = ctx.config.schema
    given = ctx.prepared(stage)
    if given is not None:
        schema, how = given, f"from --schema {data.file}"
    else:
        train = inputs[Statistics].read(Split.TRAIN)
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
    """Every name is a feature of the data (the schema) or an output of preprocessing_fn
    (``preprocessing_fn()`` gives it, or None: called only when a name is not the data's).

    Raises:
      PipelineError: naming the first that is neither, the closest feature and the choices.
    """
    import difflib

    schema = Schema.read_file(schema_file)
    raw = {f.name for f in schema.feature}
    unknown = [n for n in names if n not in raw]
    if not unknown:
        return
    fn = preprocessing_fn()
    known = raw | (_transformed_names(schema, fn) if fn else set())
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
