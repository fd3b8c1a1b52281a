"""ExampleGen+Statistics' work: one Beam job reads, types and splits the input, writes the
examples and the rejected rows, and computes the statistics over the same RecordBatches (the
data is read once).

:func:`check_data` checks the input before any Beam job starts (files, format, CSV header) and
fingerprints its content (:func:`prepare` calls it for the run); :func:`build_data_pipeline`
wires the job (tests build it on Dataflow with ``--dry_run``); :func:`run` runs it. The
declaration (``stage.py``) imports this module only where a hook runs.

Example::

    data = check_data(config, csv_format(config.data))
    p = create_pipeline(options)
    build_data_pipeline(p, config, data, csv_format(config.data), None, staging)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.types import Artifact, DataFormat, Split
from beam_pipeline.engine.artifacts import (
    Examples,
    RejectedRows,
    Schema,
    Statistics,
    TypedArtifact,
)
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.engine.fingerprint import file_digest, files_digest, json_digest, pipeline_code
from beam_pipeline.engine.stage import Outputs, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.common.csv_input import csv_format
from beam_pipeline.stages.common.rejected_rows import check_rejected
from beam_pipeline.stages.common.span_cache import (
    SpanInput,
    SpanPlan,
    build_span_pipeline,
    span_label,
)

if TYPE_CHECKING:  # Beam is imported where a job is built: the report and `runs` need none
    import apache_beam as beam

    from transforms import example_gen as eg

__all__ = [
    "DataInputs",
    "PreparedData",
    "check_data",
    "build_data_pipeline",
    "reading_note",
    "prepare",
    "run",
]

_JOB = "ExampleGen+Statistics"


@dataclasses.dataclass(frozen=True)
class DataInputs:
    """The checked inputs of the data phase.

    Attributes:
      files: per split source (None = hash split), the input files.
      data_format: CSV or TFRecord.
      header: the CSV header (empty for TFRecord).
      fingerprint: a digest of the input files' content (not their paths or times) and of
        every setting that shapes the examples; the analyzer cache's dataset key.
      spans: with ``{SPAN}`` (or a date) in ``--data``, the spans read (ascending).
      span_inputs: with ``{SPAN}``, each span's files and cached unit's key
        (``stages.common.span_cache``).
    """

    files: tuple[tuple[Optional[Split], tuple[str, ...]], ...]
    data_format: DataFormat
    header: tuple[str, ...]
    fingerprint: str
    spans: tuple[int, ...] = ()
    span_inputs: tuple[SpanInput, ...] = ()


def check_data(config: PipelineConfig, csv_format: eg.CsvFormat) -> DataInputs:
    """Resolves and checks the input files and fingerprints their content.

    Raises:
      PipelineError: no input files, an unknown format, or a bad CSV header.
    """
    from transforms import example_gen as eg
    from transforms.example_gen.input_files import has_span_spec, resolve_spans

    d = config.data
    spans: tuple[int, ...] = ()
    by_span = {}
    if has_span_spec(d.data):
        by_span = resolve_spans(d.data, d.span_window, d.spans)
        sources = ((None, tuple(f for span in by_span.values() for f in span.files)),)
        spans = tuple(by_span)
    elif d.input_splits:
        # DataConfig checked that a train split is named.
        sources = tuple(
            (split, tuple(eg.resolve_input_files(p, "input_splits"))) for split, p in d.input_splits
        )
    else:
        sources = ((None, tuple(eg.resolve_input_files(d.data))),)
    all_files = [f for _, fs in sources for f in fs]
    data_format = eg.detect_format(all_files, d.data_format)
    header = eg.FORMATS[data_format].read_columns(all_files, eg.ReadSettings(csv=csv_format))
    # The content, not the files' names, sizes or times (see beam_pipeline.engine.fingerprint);
    # with every setting that shapes the examples, its paths replaced by their content.
    settings = dataclasses.replace(
        d,
        data="",
        input_splits=tuple((split, "") for split, _ in d.input_splits),
        span_window=1,  # which spans: the files' content above says
        spans=None,
    )
    # A --schema types the CSV columns ExampleGen reads. Read before its digest is taken: a
    # missing or malformed one is named in one sentence (Schema.read_file), not a traceback.
    given = config.schema.file
    schema = file_digest(given) if given and Schema.read_file(given) is not None else None
    if by_span:
        # Each span's unit is keyed by its own content (with what shapes its examples and
        # the code that writes them), so a span is read once for every window it is in.
        span_inputs = tuple(
            SpanInput(
                span,
                tuple(picked.files),
                json_digest(
                    {
                        "content": files_digest(picked.files),
                        "settings": repr(settings),
                        "schema": schema,
                        "format": data_format.value,
                        "header": list(header),
                        "code": pipeline_code(),
                    }
                ),
                picked.version,
            )
            for span, picked in by_span.items()
        )
        fingerprint = json_digest({"spans": [[u.span, u.key] for u in span_inputs]})
        return DataInputs(sources, data_format, header, fingerprint, spans, span_inputs)
    fingerprint = json_digest(
        {
            "content": [
                [split.value if split else "", files_digest(files)] for split, files in sources
            ],
            "settings": repr(settings),
            "schema": schema,
        }
    )
    return DataInputs(sources, data_format, header, fingerprint, spans)


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """What :meth:`ExampleGenStage.prepare` reads for the run, before anything is written.

    Attributes:
      inputs: the checked inputs (:func:`check_data`).
      csv_format: how CSV input is read.
      schema: the ``--schema`` proto (it types the CSV columns), or None.
      uri: where the input is (``--data``, or ``split=path`` for each ``--input_splits``),
        as the metadata store records it.
    """

    inputs: DataInputs
    csv_format: Any  # transforms.example_gen.CsvFormat
    schema: Any
    uri: str


def build_data_pipeline(
    p: beam.Pipeline,
    config: PipelineConfig,
    inputs: DataInputs,
    csv_format: eg.CsvFormat,
    user_schema,
    staging: Mapping[Artifact, str],
) -> None:
    """Wires the data phase (ExampleGen + Statistics) into ``p`` without running it.

    The orchestrator runs what this builds; tests build it on Dataflow with ``--dry_run``.

    Args:
      p: the pipeline to add the steps to.
      config: the run's configuration.
      inputs: the checked inputs.
      csv_format: delimiter and null values of CSV input.
      user_schema: the ``--schema`` proto, or None.
      staging: the staging folders of EXAMPLES, REJECTED and STATISTICS.
    """
    import apache_beam as beam

    from transforms import example_gen as eg
    from transforms.rows import batches_of
    from transforms.statistics import GenerateStatistics
    from transforms.statistics_files import write_statistics

    splits = config.data.splits
    stats_path = {
        s: fileio.join(staging[Artifact.STATISTICS], s.value, "FeatureStats.pb") for s in splits
    }
    input_format = eg.FORMATS[inputs.data_format]
    settings = eg.ReadSettings(csv=csv_format, schema=user_schema)
    batch_sets, rejected_sets = [], []
    for split, files in inputs.files:
        splitter = eg.HashSplitter(
            buckets=config.data.split_buckets,
            partition_feature=config.data.partition_feature,
            fixed_split=split,
        )
        label = f"ExampleGen[{split.value}]" if split else "ExampleGen"
        result = p | label >> input_format.read(files, inputs.header, splitter, settings)
        batch_sets.append(result.batches)
        rejected_sets.append(result.rejected)
    batches = tuple(batch_sets) | "AllBatches" >> beam.Flatten()
    rejected = tuple(rejected_sets) | "AllRejected" >> beam.Flatten()
    _ = batches | "WriteExamples" >> eg.WriteSplitExamples(staging[Artifact.EXAMPLES], splits)
    _ = rejected | "WriteRejected" >> eg.WriteRejectedRows(staging[Artifact.REJECTED])
    for split in splits:
        _ = (
            batches
            | f"Select[{split.value}]" >> batches_of(split)
            | f"Statistics[{split.value}]" >> GenerateStatistics(split.value)
            | f"WriteStatistics[{split.value}]" >> beam.Map(write_statistics, stats_path[split])
        )


def reading_note(result) -> str:
    """How the CSV input was read, for the stage summary: the byte ranges large files were
    read apart in, and the files read whole by one reader each, with why."""
    from beam_pipeline.runtime.jobs import counter
    from transforms import example_gen as eg

    parts = []
    ranges = counter(result, eg.RANGES_COUNTER)
    if ranges:
        parts.append(f"CSV read apart in {ranges} byte ranges")
    for reason in eg.OneReader:
        n = counter(result, eg.ONE_READER_COUNTER + reason.value)
        if n:
            files = "1 CSV file" if n == 1 else f"{n} CSV files"
            parts.append(f"{files} read by one reader: {reason.why}")
    return "; ".join(parts)


def prepare(config: PipelineConfig) -> PreparedData:
    """The input files resolved and checked (format, CSV header), their content
    fingerprinted, and the ``--schema`` that types the columns read."""
    fmt = csv_format(config.data)
    inputs = check_data(config, fmt)
    d = config.data
    # As the store records artifacts' places (engine.run_records.stored_uri); that module is
    # not imported here: it imports the store, which --help does not need.
    absolute = fileio.absolute_uri
    if d.data:
        uri = absolute(d.data)
    else:
        uri = ",".join(f"{split.value}={absolute(p)}" for split, p in d.input_splits)
    given = Schema.read_file(config.schema.file) if config.schema.file else None
    return PreparedData(inputs, fmt, given, uri)


def _dry_run_result(job) -> StageResult:
    """A ``--dry_run``'s result: the job was built (its id and link in the note), not run,
    and the run stops here (later stages need the outputs it did not make)."""
    from beam_pipeline.runtime.jobs import job_note

    report = StageReport(
        "ExampleGen", StageStatus.SKIPPED, note=job_note(job), details={"job": job.to_json()}
    )
    return StageResult([report], halt=True)


def run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    out: Outputs,
) -> StageResult:
    """Runs the data phase's Beam job (with a ``{SPAN}`` input, for the spans not cached)
    and publishes the examples, the rejected rows and the statistics."""
    prepared: PreparedData = ctx.prepared(stage)
    if prepared.inputs.span_inputs:
        return _run_spans(stage, ctx, out)
    from apache_beam.options.pipeline_options import TestOptions

    from beam_pipeline.runtime.jobs import announce_job, counter, job_note
    from beam_pipeline.runtime.options import create_pipeline, run_pipeline
    from beam_pipeline.runtime.runners import wait_for_job

    config, options = ctx.config, ctx.options
    splits = config.data.splits
    staging = {a.FOLDER: out.folder(a) for a in stage.outputs}
    p = create_pipeline(options)
    data, csv, schema = prepared.inputs, prepared.csv_format, prepared.schema
    build_data_pipeline(p, config, data, csv, schema, staging)
    result = run_pipeline(p, _JOB, config.worker_start_timeout)
    announce_job(ctx, result)
    job = wait_for_job(result, options, _JOB)
    if options.view_as(TestOptions).dry_run:
        return _dry_run_result(job)
    read = counter(result, "example_gen.rows_read")
    rejected_n = counter(result, "example_gen.rows_rejected")
    rows = {s.value: counter(result, f"example_gen.rows_out.{s.value}") for s in splits}
    if read != sum(rows.values()) + rejected_n:
        raise RuntimeError(
            f"ExampleGen lost rows: read {read}, wrote {rows}, rejected {rejected_n}"
        )
    _check_rejected(ctx, out, read, rows, rejected_n)
    examples = out.artifact(
        Examples,
        split_names=[s.value for s in splits],
        rows=rows,
        fingerprint=prepared.inputs.fingerprint,
        spans=list(prepared.inputs.spans),
    )
    statistics = out.artifact(Statistics, split_names=[s.value for s in splits])
    rejected_dir = out.uri(RejectedRows)
    note = f"{rejected_n} rejected rows listed in {rejected_dir}" if rejected_n else ""
    note = "; ".join(n for n in (note, reading_note(result), job_note(job)) if n)
    return _data_result(
        out,
        (read, rows, rejected_n),
        (examples, note, {"job": job.to_json()}),
        (statistics, "computed in ExampleGen's Beam job (same pass over the data)", {}),
    )


def _run_spans(stage: Stage, ctx: StageContext, out: Outputs) -> StageResult:
    """A ``{SPAN}`` input: the spans without a cached unit are read (one Beam job), the
    run's artifacts are built from every span's unit (``stages.common.span_cache``)."""
    from apache_beam.options.pipeline_options import TestOptions

    from beam_pipeline.runtime.jobs import announce_job, counter, job_note
    from beam_pipeline.runtime.options import create_pipeline, run_pipeline
    from beam_pipeline.runtime.runners import wait_for_job

    config, options = ctx.config, ctx.options
    splits = config.data.splits
    staging = {a.FOLDER: out.folder(a) for a in stage.outputs}
    prepared: PreparedData = ctx.prepared(stage)
    plan = SpanPlan(ctx.run_dir.cache_path("spans"), prepared.inputs.span_inputs)
    plan.open()
    job = result = None
    try:
        if plan.missing:
            p = create_pipeline(options)
            data, csv, schema = prepared.inputs, prepared.csv_format, prepared.schema
            build_span_pipeline(p, config.data, data, csv, schema, plan)
            result = run_pipeline(p, _JOB, config.worker_start_timeout)
            announce_job(ctx, result)
            job = wait_for_job(result, options, _JOB)
            if options.view_as(TestOptions).dry_run:
                plan.discard()
                return _dry_run_result(job)
            computed_read = counter(result, "example_gen.rows_read")
            computed_out = sum(counter(result, f"example_gen.rows_out.{s.value}") for s in splits)
            computed_rejected = counter(result, "example_gen.rows_rejected")
            if computed_read != computed_out + computed_rejected:
                raise RuntimeError(
                    f"ExampleGen lost rows: read {computed_read}, wrote {computed_out}, "
                    f"rejected {computed_rejected}"
                )
        plan.publish(splits)
    except BaseException:
        plan.discard()
        raise
    totals = plan.assemble(splits, staging)
    read, rows, rejected_n = totals["read"], totals["rows"], totals["rejected"]
    records = [plan.record(u) for u in plan.missing]
    read_now = sum(sum(r["rows"].values()) + r["rejected"] for r in records)
    _check_rejected(ctx, out, read, rows, rejected_n)
    spans = [u.span for u in plan.inputs]
    reused = [u.span for u in plan.reused]
    computed = [u.span for u in plan.missing]
    span_keys = {str(u.span): u.key for u in plan.inputs}
    examples = out.artifact(
        Examples,
        split_names=[s.value for s in splits],
        rows=rows,
        fingerprint=prepared.inputs.fingerprint,
        spans=spans,
        span_keys=span_keys,
        spans_reused=reused,
    )
    statistics = out.artifact(
        Statistics, split_names=[s.value for s in splits], spans=spans, spans_reused=reused
    )
    rejected_dir = out.uri(RejectedRows)
    parts = [span_label(spans)]
    if reused:
        parts.append(
            f"{span_label(reused)} reused from {plan.cache_dir}"
            + (f", {span_label(computed)} read ({read_now} rows)" if computed else "")
        )
    elif computed:
        parts.append(f"{read_now} rows read")
    versions = {u.span: u.version for u in plan.inputs if u.version is not None}
    if versions:
        parts.append("latest versions: " + ", ".join(f"span {s} v{v}" for s, v in versions.items()))
    for span, why in sorted(plan.removed.items()):
        parts.append(f"span {span}'s cached unit removed ({why})")
    if rejected_n:
        parts.append(f"{rejected_n} rejected rows listed in {rejected_dir}")
    if result is not None:
        parts += [reading_note(result), job_note(job)]
    details = {"spans": spans, "spans_reused": reused, "spans_read": computed}
    details["rows_read"] = read_now
    if versions:
        details["versions"] = {str(s): v for s, v in versions.items()}
    if job is not None:
        details["job"] = job.to_json()
    merged = f"merged from the per-span statistics of {span_label(spans)}" + (
        f" ({span_label(reused)} not read again)" if reused else ""
    )
    return _data_result(
        out,
        (read, rows, rejected_n),
        (examples, "; ".join(n for n in parts if n), details),
        (statistics, merged, {"spans": spans, "spans_reused": reused}),
    )


def _data_result(
    out: Outputs,
    counts: tuple[int, Mapping[str, int], int],
    example_row: tuple[Examples, str, dict],
    statistics_row: tuple[Statistics, str, dict],
) -> StageResult:
    """ExampleGen+Statistics' result: its two summary rows and its three outputs.

    Args:
      out: the stage's outputs.
      counts: (rows read, rows written per split, rows rejected).
      example_row: (the Examples artifact, ExampleGen's note, its details).
      statistics_row: (the Statistics artifact, its note, its details).
    """
    read, rows, rejected_n = counts
    examples, note, details = example_row
    statistics, stats_note, stats_details = statistics_row
    reports = [
        StageReport(
            "ExampleGen",
            StageStatus.OK,
            {"all": read},
            rows,
            rejected_n,
            0.0,
            examples.uri,
            note,
            details=details,
        ),
        StageReport(
            "Statistics",
            StageStatus.OK,
            rows,
            {},
            0,
            0.0,
            statistics.uri,
            stats_note,
            details=stats_details,
        ),
    ]
    rejected = out.artifact(RejectedRows, rows=rejected_n)
    return StageResult(reports, outputs=(rejected, examples, statistics))


def _check_rejected(
    ctx: StageContext, out: Outputs, read: int, rows: Mapping[str, int], rejected_n: int
) -> None:
    """Fails the stage (the rejected rows published) on no rows or too many rejected."""
    config = ctx.config
    check_rejected(
        out,
        RejectedRows,
        "ExampleGen",
        read=read,
        rows_out=rows,
        rejected=rejected_n,
        limit=config.data.max_rejected_fraction,
        rows_of="input rows",
        empty=f"--data {config.data.data} holds no data rows; add rows below the header.",
    )
