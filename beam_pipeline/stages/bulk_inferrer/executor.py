"""The BulkInferrer's work: the new examples checked, the model chosen, the scoring job run.

:func:`run` is the stage's ``run`` hook: it wires :func:`build_inference_pipeline` (Beam's
``RunInference`` with :mod:`transforms.bulk_inferrer`'s SavedModel handler), runs it on the
run's runner and checks rows read = rows scored + rows rejected from the job's counters.

Example::

    checked = check_infer_inputs(config, csv_format(config.data))  # before any job starts
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, first_line
from beam_pipeline.core.types import DataFormat, Split
from beam_pipeline.engine.artifacts import Model, ModelBlessing, Schema, TypedArtifact
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.engine.fingerprint import files_digest, folder_digest
from beam_pipeline.engine.stage import Outputs, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.bulk_inferrer.artifacts import (
    InferenceRejectedRows,
    InferenceResult,
    InferredExamples,
)
from beam_pipeline.stages.common.csv_input import csv_format
from beam_pipeline.stages.common.rejected_rows import check_rejected

if TYPE_CHECKING:
    import apache_beam as beam

    from transforms import example_gen as eg

__all__ = [
    "BLESSED",
    "LATEST_BLESSED",
    "InferInputs",
    "build_inference_pipeline",
    "check_infer_inputs",
    "parameters",
    "run",
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
    from beam_pipeline.stages.common.metadata_store import open_store

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


def _check_model(data: str, model_dir: str, how: str, checked: InferInputs) -> None:
    """The model loads and scores on the launcher, and the CSV has every column its
    serving signature requires, before the job (else every row would be refused).

    Raises:
      PipelineError: it does not load, or a column it needs is missing.
    """
    from transforms.bulk_inferrer import required_features

    try:
        needed = required_features(model_dir)
    except Exception as e:  # noqa: BLE001 - whatever TensorFlow raises for a bad SavedModel
        raise PipelineError(
            f"{how} cannot be loaded as a SavedModel from {model_dir} ({first_line(e)}); pass "
            f"--infer_model a folder tf.saved_model.save wrote, {BLESSED} or {LATEST_BLESSED}."
        ) from None
    # A CSV's columns are known now; a tf.Example's features only per row (a row without
    # one is rejected, naming it).
    missing = [name for name in needed if checked.header and name not in checked.header]
    if missing:
        raise PipelineError(
            f"--infer_data {data} has no column {', '.join(missing)}, which the model "
            f"({how}) reads from every example; add {'it' if len(missing) == 1 else 'them'} "
            f"to the data (its columns: {', '.join(checked.header)})."
        )


def _with_extra_columns(schema, header: tuple[str, ...]):
    """The schema the rows are read with: the run's, plus each column it lacks as a string
    feature. Such a column (a row id, a key) rides along in each PredictionLog's request
    example, so predictions can be joined back; the model ignores features it does not
    parse."""
    extra = [c for c in header if schema is not None and c not in {f.name for f in schema.feature}]
    if not extra:
        return schema
    from tensorflow_metadata.proto.v0 import schema_pb2

    widened = schema_pb2.Schema()
    widened.CopyFrom(schema)
    for column in extra:
        widened.feature.add(name=column, type=schema_pb2.BYTES)
    return widened


def _check_rejected(ctx: StageContext, out: Outputs, read: int, scored: int, rejected: int):
    """Fails the stage (the rejected rows published) when no row was read or more than
    ``--max_rejected_fraction`` of them were rejected, as ExampleGen does."""
    data = ctx.config.bulk_inferrer.data
    check_rejected(
        out,
        InferenceRejectedRows,
        _STAGE,
        read=read,
        rows_out={"scored": scored},
        rejected=rejected,
        limit=ctx.config.data.max_rejected_fraction,
        rows_of="rows of --infer_data",
        empty=f"--infer_data {data} holds no rows to score; add rows to it.",
    )


def parameters(ctx: StageContext) -> dict[str, Any]:
    """The stage's cache-key parameters: the files to score and the model by content."""
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
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    out: Outputs,
) -> StageResult:
    """The stage's ``run`` hook: scores the checked examples with the chosen model."""
    from apache_beam.options.pipeline_options import TestOptions

    from beam_pipeline.runtime.jobs import announce_job, counter, job_note
    from beam_pipeline.runtime.options import create_pipeline, run_pipeline
    from beam_pipeline.runtime.runners import wait_for_job
    from transforms import example_gen as eg

    b = ctx.config.bulk_inferrer
    checked = check_infer_inputs(ctx.config, csv_format(ctx.config.data))
    if checked is None:
        return StageResult([StageReport(_STAGE, StageStatus.SKIPPED, note="no --infer_data")])
    model_dir, how = _model(ctx, inputs)
    if model_dir is None:
        note = f"not scored: {how}"
        return StageResult([StageReport(_STAGE, StageStatus.SKIPPED, note=note)])
    _check_model(b.data, model_dir, how, checked)
    schema = inputs.get(Schema)
    given = ctx.config.schema.file  # the --schema, when no Schema stage published one
    schema = schema.read() if schema is not None else (Schema.read_file(given) if given else None)
    if checked.data_format is DataFormat.TFRECORD:
        # tf.Examples are scored as they are, every feature kept (the schema's decoder
        # would drop those it does not list, a key column among them).
        schema = None
    settings = eg.ReadSettings(
        csv=csv_format(ctx.config.data), schema=_with_extra_columns(schema, checked.header)
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
    _check_rejected(ctx, out, read, scored, rejected)
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
