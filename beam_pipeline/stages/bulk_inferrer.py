"""The BulkInferrer stage: new raw examples scored by a model, as PredictionLogs.

``--infer_data PATTERN`` names the examples (CSV or TFRecord, read by ExampleGen's readers
with the run's schema); ``--infer_model`` which model scores them: this run's when the
Evaluator blessed it (``blessed``, the default), the pipeline's newest blessed model from
the metadata store (``latest_blessed``) or a SavedModel folder. The Beam job
(:mod:`transforms.bulk_inferrer`: Beam's ``RunInference`` with our SavedModel handler)
runs on the run's runner and writes ``inference_result/prediction_logs-*.gz`` (TFX's
``InferenceResult``), ``inference_rejected/`` (the rows it could not score) and, with
``--infer_output_examples``, ``inferred_examples/``. Rows read = rows scored + rows
rejected, from the job's counters, or the stage fails.

Example::

    python -m beam_pipeline --data=train.csv --module_file=m.py --infer_data='new/*.csv'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.core.types import DataFormat, Split
from beam_pipeline.engine.artifacts import (
    Model,
    ModelBlessing,
    Schema,
    TypedArtifact,
)
from beam_pipeline.engine.config import PipelineConfig, check_int
from beam_pipeline.engine.fingerprint import files_digest, folder_digest
from beam_pipeline.engine.stage import Input, Outputs, Preflight, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.common.csv_input import csv_format

if TYPE_CHECKING:
    import apache_beam as beam

    from transforms import example_gen as eg

__all__ = [
    "InferenceResult",
    "InferredExamples",
    "InferenceRejectedRows",
    "BulkInferrerConfig",
    "BulkInferrerStage",
    "InferInputs",
    "build_inference_pipeline",
    "check_infer_inputs",
]

_JOB = "BulkInferrer"
_STAGE = "BulkInferrer"
BLESSED = "blessed"
LATEST_BLESSED = "latest_blessed"


@dataclasses.dataclass(frozen=True)
class InferInputs:
    """The checked files to score: their format and CSV header."""

    files: tuple[str, ...]
    data_format: DataFormat
    header: tuple[str, ...]


def check_infer_inputs(config: PipelineConfig, csv_format: eg.CsvFormat) -> Optional[InferInputs]:
    """Resolves ``--infer_data`` and checks ``--infer_model`` before any job starts (None
    without ``--infer_data``).

    Raises:
      PipelineError: no files match, their format is unknown, a bad CSV header, or an
        ``--infer_model`` folder that holds no SavedModel.
    """
    from transforms import example_gen as eg

    b = config.bulk_inferrer
    if not b.data:
        return None
    if b.model not in (BLESSED, LATEST_BLESSED) and not fileio.exists(
        fileio.join(b.model, "saved_model.pb")
    ):
        raise PipelineError(
            f"--infer_model {b.model} holds no saved_model.pb; pass a SavedModel folder, "
            f"{BLESSED} (this run's model when blessed) or {LATEST_BLESSED}."
        )
    try:
        files = tuple(eg.resolve_input_files(b.data))
    except PipelineError as e:
        raise PipelineError(f"--infer_data: {e}") from e
    data_format = eg.detect_format(list(files), config.data.data_format)
    header = eg.FORMATS[data_format].read_columns(list(files), eg.ReadSettings(csv=csv_format))
    return InferInputs(files, data_format, tuple(header))


def build_inference_pipeline(
    p: beam.Pipeline,
    inputs: InferInputs,
    settings: eg.ReadSettings,
    model_dir: str,
    max_batch_size: int,
    staging: Mapping[type[TypedArtifact], str],
) -> None:
    """Wires the scoring job into ``p`` without running it (tests build it on Dataflow
    with ``--dry_run``).

    Args:
      p: the pipeline.
      inputs: the checked files.
      settings: how they are read (CSV options, the run's schema).
      model_dir: the SavedModel that scores them.
      max_batch_size: the most examples per model call.
      staging: the staging folders of InferenceResult, InferenceRejectedRows and, to
        write the joined examples too, InferredExamples.
    """
    from transforms import example_gen as eg
    from transforms.bulk_inferrer import (
        SavedModelHandler,
        ScoreExamples,
        WriteInferredExamples,
        WritePredictionLogs,
    )

    # Every row is scored: one "split" that takes them all.
    splitter = eg.HashSplitter(fixed_split=Split.TEST)
    read = p | "Read" >> eg.FORMATS[inputs.data_format].read(
        inputs.files, inputs.header, splitter, settings
    )
    scored = read | "Score" >> ScoreExamples(SavedModelHandler(model_dir, max_batch_size))
    _ = scored.logs | "WritePredictionLogs" >> WritePredictionLogs(staging[InferenceResult])
    _ = scored.rejected | "WriteRejected" >> eg.WriteRejectedRows(staging[InferenceRejectedRows])
    if InferredExamples in staging:
        _ = scored.logs | "WriteExamples" >> WriteInferredExamples(staging[InferredExamples])


def _latest_blessed(ctx: StageContext) -> Optional[str]:
    from beam_pipeline.stages.common.store import open_store

    with open_store(ctx) as store:
        found = store.latest_blessed_model() if store is not None else None
    return found.uri if found is not None else None


def _model(
    ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact]
) -> tuple[Optional[str], str]:
    """(the model folder to score with, or None; how it was chosen or why there is none)."""
    choice = ctx.config.bulk_inferrer.model
    if choice == LATEST_BLESSED:
        found = _latest_blessed(ctx)
        if found is None:
            return None, "the pipeline has no blessed model yet (--infer_model latest_blessed)"
        return found, f"the latest blessed model {found}"
    if choice != BLESSED:
        return choice, f"--infer_model {choice}"
    model = inputs.get(Model)
    if model is None:
        return None, "this run trained no model; pass --infer_model latest_blessed or a folder"
    blessing = inputs.get(ModelBlessing)
    if blessing is None or not blessing.properties.get("blessed"):
        return None, (
            "this run's model is not blessed (see the Evaluator's row); pass --infer_model "
            "latest_blessed or a SavedModel folder to score with another model"
        )
    return model.uri, f"this run's blessed model {model.uri}"


class InferenceResult(TypedArtifact):
    """The BulkInferrer's PredictionLog TFRecords, ``prediction_logs-*.gz`` (TFX's
    ``InferenceResult``); properties ``rows`` (scored), ``model`` (the model's folder)."""

    FOLDER = "inference_result"


class InferredExamples(TypedArtifact):
    """The scored examples with each prediction output joined as a feature
    ``prediction_<output>`` (TFX's ``output_example_spec``), ``examples-*.tfrecord.gz``."""

    FOLDER = "inferred_examples"


class InferenceRejectedRows(TypedArtifact):
    """The rows the BulkInferrer could not score, one JSON object per row (file, line,
    reason), as ExampleGen's rejected rows; property ``rows``."""

    FOLDER = "inference_rejected"


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
    Config = BulkInferrerConfig
    config_key = "bulk_inferrer"
    inputs = (
        Input(Model, key="model", optional=True),
        Input(ModelBlessing, key="blessing", optional=True),
        Input(Schema, key="schema", optional=True),
    )
    outputs = (InferenceRejectedRows, InferenceResult, InferredExamples)

    def preflight(self, run: Preflight) -> None:
        # The new examples and the model, checked now rather than after the training.
        check_infer_inputs(run.config, csv_format(run.config))

    def parameters(self, ctx: StageContext) -> dict[str, Any]:
        from transforms.example_gen.input_files import resolve_input_files

        b = ctx.config.bulk_inferrer
        if not b.data:
            return {"infer_data": None}
        files = resolve_input_files(b.data)
        if b.model == LATEST_BLESSED:
            model = _latest_blessed(ctx)
            model = fileio.absolute_uri(model) if model else None
        elif b.model == BLESSED:
            model = BLESSED  # this run's model: its key is the Model input's
        else:
            model = folder_digest(b.model)
        return {
            "infer_data": files_digest(files),
            "infer_model": model,
            "max_batch_size": b.max_batch_size,
            "output_examples": b.output_examples,
        }

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        from apache_beam.options.pipeline_options import TestOptions

        from beam_pipeline.runtime.jobs import announce_job, counter, job_note
        from beam_pipeline.runtime.options import create_pipeline, run_pipeline
        from beam_pipeline.runtime.runners import wait_for_job
        from beam_pipeline.stages.common.schema_file import read_schema, user_schema
        from transforms import example_gen as eg

        b = ctx.config.bulk_inferrer
        checked = check_infer_inputs(ctx.config, csv_format(ctx.config))
        if checked is None:
            return StageResult([StageReport(_STAGE, StageStatus.SKIPPED, note="no --infer_data")])
        model_dir, how = _model(ctx, inputs)
        if model_dir is None:
            note = f"not scored: {how}"
            return StageResult([StageReport(_STAGE, StageStatus.SKIPPED, note=note)])
        schema = inputs.get(Schema)
        settings = eg.ReadSettings(
            csv=csv_format(ctx.config),
            schema=read_schema(schema.file) if schema is not None else user_schema(ctx.config),
        )
        staging = {a: out.folder(a) for a in (InferenceResult, InferenceRejectedRows)}
        if b.output_examples:
            staging[InferredExamples] = out.folder(InferredExamples)
        p = create_pipeline(ctx.options)
        build_inference_pipeline(p, checked, settings, model_dir, b.max_batch_size, staging)
        result = run_pipeline(p, _JOB, ctx.config.worker_start_timeout)
        announce_job(ctx, result)
        job = wait_for_job(result, ctx.options, _JOB)
        if ctx.options.view_as(TestOptions).dry_run:
            report = StageReport(
                _STAGE, StageStatus.SKIPPED, note=job_note(job), details={"job": job.to_json()}
            )
            return StageResult([report], halt=True)
        from transforms.bulk_inferrer import ROWS_REFUSED, ROWS_SCORED

        read = counter(result, "example_gen.rows_read")
        scored = counter(result, ROWS_SCORED)
        refused = counter(result, ROWS_REFUSED)
        rejected = counter(result, "example_gen.rows_rejected") + refused
        if read != scored + rejected:
            raise RuntimeError(
                f"The BulkInferrer lost rows: read {read}, scored {scored}, rejected {rejected}"
            )
        rejected_dir = out.uri(InferenceRejectedRows)
        notes = [f"{scored} rows scored with {how}"]
        if rejected:
            notes.append(f"{rejected} rejected rows listed in {rejected_dir}")
        notes.append(job_note(job))
        report = StageReport(
            _STAGE,
            StageStatus.OK,
            {"all": read},
            {"scored": scored},
            rejected,
            0.0,
            out.uri(InferenceResult),
            "; ".join(n for n in notes if n),
            details={
                "job": job.to_json(),
                "model": model_dir,
                "rows_read": read,
                "rows_scored": scored,
                "rows_rejected": rejected,
                "rows_refused_by_model": refused,
            },
        )
        outputs = [
            out.artifact(InferenceRejectedRows, rows=rejected),
            out.artifact(InferenceResult, rows=scored, model=fileio.absolute_uri(model_dir)),
        ]
        if b.output_examples:
            outputs.append(out.artifact(InferredExamples, rows=scored))
        return StageResult([report], outputs=outputs)
