"""The data phase: ExampleGen and Statistics in one Beam job (the data is read once).

ExampleGen reads, types and splits the input and writes the examples and the rejected
rows; Statistics is a streaming combine over the same RecordBatches. :func:`check_data`
checks the input before any Beam job starts (files, format, CSV header) and fingerprints
its content (:meth:`ExampleGenStage.prepare` calls it for the run); :func:`build_data_pipeline`
wires the job (tests build it on Dataflow with ``--dry_run``); :class:`ExampleGenStage` runs it.

Example::

    data = check_data(config, csv_format(config))
    p = create_pipeline(options)
    build_data_pipeline(p, config, data, csv_format(config), None, staging)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.core.types import DEFAULT_CSV_MAX_FIELD_BYTES, Artifact, DataFormat, Split
from beam_pipeline.engine.artifacts import (
    Anomalies,
    Examples,
    RejectedRows,
    Statistics,
    TypedArtifact,
)
from beam_pipeline.engine.config import PipelineConfig, check_int
from beam_pipeline.engine.fingerprint import file_digest, files_digest, json_digest, pipeline_code
from beam_pipeline.engine.history_entry import HistoryEntry
from beam_pipeline.engine.report_sections import (
    Code,
    Fragment,
    Note,
    ReportSection,
    ReportView,
    Table,
)
from beam_pipeline.engine.stage import (
    InputData,
    Outputs,
    Stage,
    StageContext,
    StageFailed,
    StageResult,
)
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.common.csv_input import csv_format
from beam_pipeline.stages.common.span_cache import (
    SpanInput,
    SpanPlan,
    build_span_pipeline,
    span_label,
)

if TYPE_CHECKING:  # Beam is imported where a job is built: --help and `runs` need none
    import apache_beam as beam

    from transforms import example_gen as eg

__all__ = [
    "DataConfig",
    "DataInputs",
    "check_data",
    "build_data_pipeline",
    "reading_note",
    "ExampleGenStage",
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
    from beam_pipeline.stages.common.schema_file import user_schema
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
        sources = tuple((split, tuple(eg.resolve_input_files(p))) for split, p in d.input_splits)
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
    # missing or malformed one is named in one sentence (read_schema), not a traceback.
    schema = file_digest(config.schema.file) if user_schema(config) is not None else None
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
    from transforms.statistics import GenerateStatistics, write_statistics

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
            | f"Select[{split.value}]"
            >> beam.FlatMap(lambda sb, s: [sb.batch] if sb.split is s else [], split)
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


def _first_rejected(rejected_dir: str) -> str:
    """The rejected row with the smallest (file, line), as 'file:line reason'."""
    first = None
    for path in fileio.glob(fileio.join(rejected_dir, "rejected-*")):
        with fileio.open(path) as f:
            for line in f:
                row = json.loads(line)
                key = (row["file"], row["line"])
                if first is None or key < first[0]:
                    first = (key, row["reason"])
    return f"{first[0][0]}:{first[0][1]} {first[1]}" if first else "none"


def _split_pairs(flag: str, value_type: type) -> Callable[[Any], tuple]:
    """Parses ``train=2,eval=1`` (or a YAML mapping) into (Split, value) pairs."""

    def parse(text: Any) -> tuple:
        if isinstance(text, dict):
            items = list(text.items())
        else:
            items = []
            for part in str(text).split(","):
                name, sep, value = part.partition("=")
                if not sep:
                    raise PipelineError(
                        f"--{flag} {text!r} must look like train=...,eval=...; fix its format."
                    )
                items.append((name.strip(), value.strip()))
        out = []
        for name, value in items:
            try:
                split = Split(name)
            except ValueError:
                raise PipelineError(
                    f"--{flag} names split {name!r}; use train, eval or test."
                ) from None
            try:
                out.append((split, value_type(value)))
            except ValueError:
                raise PipelineError(
                    f"--{flag} gives {name} {value!r}, which is not a whole number; pass e.g. "
                    "--split_buckets=train=2,eval=1."
                ) from None
        return tuple(out)

    return parse


def _span_range(value: Any) -> tuple[int, int]:
    """``--spans FIRST:LAST`` as (FIRST, LAST)."""
    first, sep, last = str(value).partition(":")
    try:
        if not sep:
            raise ValueError
        return int(first), int(last)
    except ValueError:
        raise PipelineError(
            f"--spans={value!r} is not FIRST:LAST; pass two span numbers, e.g. --spans=1:3."
        ) from None


def _fraction(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)  # YAML reads 1e-2 as a string
        except ValueError:
            pass  # refused with its range by DataConfig
    return value


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the input data is and how ExampleGen reads, splits and checks it (see each
    setting's help; ``split_buckets`` are (split, buckets) pairs of the deterministic hash
    split, ``input_splits`` (split, file pattern) pairs of input that is already split)."""

    data: str = setting(
        "",
        flag="data",
        help="CSV or TFRecord (tf.Example, optionally .gz) file, folder or glob.",
        path=True,
        worker_path=True,
        identity=False,  # by content: the run's identity holds the data's digest
    )
    data_format: DataFormat = setting(
        DataFormat.AUTO,
        flag="data_format",
        help="The input files' format; auto: from their names.",
        kind="choice",
        choices=tuple(f.value for f in DataFormat),
        parse=DataFormat,
    )
    csv_delimiter: str = setting(",", flag="csv_delimiter", help="The CSV files' field separator.")
    csv_null_values: tuple[str, ...] = setting(
        ("",),
        flag="csv_null_values",
        help="Comma-separated values that mean missing, e.g. 'NA,null'.",
        kind="list",
    )
    split_buckets: tuple[tuple[Split, int], ...] = setting(
        ((Split.TRAIN, 2), (Split.EVAL, 1)),
        flag="split_buckets",
        help="Hash split, e.g. train=2,eval=1.",
        parse=_split_pairs("split_buckets", int),
    )
    input_splits: tuple[tuple[Split, str], ...] = setting(
        (),
        flag="input_splits",
        help="Input already split: train=PATTERN,eval=PATTERN.",
        parse=_split_pairs("input_splits", str),
        worker_path=True,
        identity=False,
    )
    partition_feature: Optional[str] = setting(
        None, flag="partition_feature", help="Rows sharing this column's value share a split."
    )
    max_rejected_fraction: float = setting(
        0.0,
        flag="max_rejected_fraction",
        help="Fail when more than this fraction of rows is rejected.",
        kind="float",
        parse=_fraction,
    )
    csv_max_field_bytes: int = setting(
        DEFAULT_CSV_MAX_FIELD_BYTES,
        flag="csv_max_field_bytes",
        help="A CSV row with a longer field (UTF-8 bytes) is rejected (default 16 MiB).",
        kind="int",
    )
    span_window: int = setting(
        1,
        flag="span_window",
        help="With {SPAN} in --data: read the N latest spans (default 1, the latest).",
        kind="int",
    )
    spans: Optional[tuple[int, int]] = setting(
        None,
        flag="spans",
        help="With {SPAN} in --data: read spans FIRST:LAST, e.g. 1:3.",
        parse=_span_range,
    )

    def __post_init__(self):
        check_int("span_window", self.span_window, 1)
        if self.spans is not None and not 0 <= self.spans[0] <= self.spans[1]:
            raise PipelineError(
                f"--spans={self.spans[0]}:{self.spans[1]} is not a range of spans; pass "
                "FIRST:LAST with FIRST <= LAST, e.g. --spans=1:3."
            )
        if (self.spans is not None or self.span_window != 1) and not (
            "{SPAN}" in self.data or "{YYYY}" in self.data
        ):
            raise PipelineError(
                "--spans and --span_window need {SPAN} or {YYYY}{MM}{DD} in --data (e.g. "
                "--data='root/span-{SPAN}/*.csv'); add it or drop them."
            )
        # Checked here, when flags become config, so that a bad value stops the run before
        # any file is written or any Beam job runs.
        f = self.max_rejected_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 <= f <= 1:
            # NaN fails both comparisons, so it is refused too (it would turn the guard off).
            raise PipelineError(
                f"--max_rejected_fraction={f!r} is out of range: pass a number from 0 to 1 "
                "(the share of input rows that may be rejected), e.g. 0.01."
            )
        check_int("csv_max_field_bytes", self.csv_max_field_bytes, 1)
        if not self.split_buckets:
            raise PipelineError(
                "--split_buckets names no split; pass e.g. --split_buckets=train=2,eval=1."
            )
        for split, n in self.split_buckets:
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise PipelineError(
                    f"--split_buckets gives {split.value} {n!r} buckets: pass a whole number of "
                    "at least 1 for each split, e.g. --split_buckets=train=2,eval=1."
                )
        for flag, pairs, example in (
            ("split_buckets", self.split_buckets, "train=2,eval=1"),
            ("input_splits", self.input_splits, "train=PATTERN,eval=PATTERN"),
        ):
            names = [s.value for s, _ in pairs]
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise PipelineError(
                    f"--{flag} names split {twice[0]} twice; name each split once, e.g. "
                    f"--{flag}={example}."
                )
        if Split.TRAIN not in self.splits:
            flag, example = (
                ("input_splits", "train=PATTERN")
                if self.input_splits
                else ("split_buckets", "train=N")
            )
            raise PipelineError(f"--{flag} has no train split; add {example}.")

    @property
    def splits(self) -> tuple[Split, ...]:
        if self.input_splits:
            return tuple(s for s, _ in self.input_splits)
        return tuple(s for s, _ in self.split_buckets)


class ExampleGenStage(Stage):
    """ExampleGen + Statistics: the examples, the rejected rows and per-split statistics."""

    name = "ExampleGen+Statistics"
    Config = DataConfig
    config_key = "data"
    reads_input_data = True
    outputs = (RejectedRows, Examples, Statistics)

    def prepare(self, config: PipelineConfig, options: Any) -> PreparedData:
        """The input files resolved and checked (format, CSV header), their content
        fingerprinted, and the ``--schema`` that types the columns read."""
        from beam_pipeline.stages.common.schema_file import user_schema

        fmt = csv_format(config)
        inputs = check_data(config, fmt)
        d = config.data
        # As the store records artifacts' places (engine.records.stored_uri); that module is
        # not imported here: it imports the store, which --help does not need.
        absolute = fileio.absolute_uri
        if d.data:
            uri = absolute(d.data)
        else:
            uri = ",".join(f"{split.value}={absolute(p)}" for split, p in d.input_splits)
        return PreparedData(inputs, fmt, user_schema(config), uri)

    def input_data(self, prepared: PreparedData) -> InputData:
        return InputData(prepared.uri, prepared.inputs.fingerprint)

    def parameters(self, ctx: StageContext) -> dict:
        return {"data": ctx.prepared(self).inputs.fingerprint}

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        prepared: PreparedData = ctx.prepared(self)
        if prepared.inputs.span_inputs:
            return self._run_spans(ctx, out)
        from apache_beam.options.pipeline_options import TestOptions

        from beam_pipeline.runtime.jobs import announce_job, counter, job_note
        from beam_pipeline.runtime.options import create_pipeline, run_pipeline
        from beam_pipeline.runtime.runners import wait_for_job

        config, options = ctx.config, ctx.options
        splits = config.data.splits
        staging = {a.FOLDER: out.folder(a) for a in self.outputs}
        p = create_pipeline(options)
        data, csv, schema = prepared.inputs, prepared.csv_format, prepared.schema
        build_data_pipeline(p, config, data, csv, schema, staging)
        result = run_pipeline(p, _JOB, config.worker_start_timeout)
        announce_job(ctx, result)
        job = wait_for_job(result, options, _JOB)
        if options.view_as(TestOptions).dry_run:
            report = StageReport(
                "ExampleGen",
                StageStatus.SKIPPED,
                note=job_note(job),
                details={"job": job.to_json()},
            )
            return StageResult([report], halt=True)
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

    def _run_spans(self, ctx: StageContext, out: Outputs) -> StageResult:
        """A ``{SPAN}`` input: the spans without a cached unit are read (one Beam job), the
        run's artifacts are built from every span's unit (``stages.common.span_cache``)."""
        from apache_beam.options.pipeline_options import TestOptions

        from beam_pipeline.runtime.jobs import announce_job, counter, job_note
        from beam_pipeline.runtime.options import create_pipeline, run_pipeline
        from beam_pipeline.runtime.runners import wait_for_job

        config, options = ctx.config, ctx.options
        splits = config.data.splits
        staging = {a.FOLDER: out.folder(a) for a in self.outputs}
        prepared: PreparedData = ctx.prepared(self)
        plan = SpanPlan(ctx.run_dir.cache_path("spans"), prepared.inputs.span_inputs)
        plan.open()
        job = result = None
        try:
            if plan.missing:
                p = create_pipeline(options)
                data, csv, schema = prepared.inputs, prepared.csv_format, prepared.schema
                build_span_pipeline(p, config, data, csv, schema, plan)
                result = run_pipeline(p, _JOB, config.worker_start_timeout)
                announce_job(ctx, result)
                job = wait_for_job(result, options, _JOB)
                if options.view_as(TestOptions).dry_run:
                    plan.discard()
                    report = StageReport(
                        "ExampleGen",
                        StageStatus.SKIPPED,
                        note=job_note(job),
                        details={"job": job.to_json()},
                    )
                    return StageResult([report], halt=True)
                computed_read = counter(result, "example_gen.rows_read")
                computed_out = sum(
                    counter(result, f"example_gen.rows_out.{s.value}") for s in splits
                )
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
            parts.append(
                "latest versions: " + ", ".join(f"span {s} v{v}" for s, v in versions.items())
            )
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

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """The statistics per feature and split (anomalous features marked) and the first
        rejected rows."""
        return [_statistics_section(view), _rejected_section(view)]

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        # With a {SPAN} input: the spans the examples hold and those reused, not read
        # (keys of runs list --json; a line of runs show).
        details = reports[0].details if reports else {}
        spans, reused = details.get("spans"), details.get("spans_reused") or []
        if not spans:
            return HistoryEntry()
        line = f"Data: {span_label(spans)}" + (
            f" ({span_label(reused)} reused from earlier runs, not read)" if reused else ""
        )
        return HistoryEntry(facts={"spans": spans, "spans_reused": reused}, lines=[line])


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
    rejected_dir = out.uri(RejectedRows)
    fraction = rejected_n / read if read else 0.0
    if read == 0 or fraction > config.data.max_rejected_fraction:
        report = StageReport(
            "ExampleGen", StageStatus.FAILED, {"all": read}, rows, rejected_n, 0.0, rejected_dir
        )
        if read == 0:
            error = PipelineError(
                f"--data {config.data.data} holds no data rows; add rows below the header."
            )
        else:
            first = _first_rejected(out.folder(RejectedRows))
            error = PipelineError(
                f"{rejected_n} of {read} input rows ({fraction:.2%}) were rejected, more "
                f"than --max_rejected_fraction={config.data.max_rejected_fraction} (first: "
                f"{first}); fix those rows (all listed in {rejected_dir}) or raise "
                "--max_rejected_fraction."
            )
        raise StageFailed(error, [report], publish=(RejectedRows,))


# -- its report sections (read without Beam or TensorFlow) -----------------------------------

REJECTED_ROWS_SHOWN = 20
_TOP_VALUES_SHOWN = 10
_STATISTICS_STYLE = (
    ".anomalous { color: #cf222e; } .badge { background: #ffebe9; color: #cf222e; border: "
    "1px solid #f0a0a0; border-radius: 3px; font-size: 11px; padding: 0 4px; margin-left: "
    ".4em; }\n"
)


def _statistics_section(view: ReportView) -> ReportSection:
    """Per feature and split (train and eval side by side, as Facets shows them) the
    statistics a user checks, with overlaid histograms; the Validation's anomalies mark
    their features."""
    from beam_pipeline.report.svg import overlaid_histograms
    from beam_pipeline.stages.common.anomalies_file import read_anomalies, split_order

    section = ReportSection(
        "statistics",
        "Statistics",
        artifacts=(Statistics,),
        empty="No statistics.",
        style=_STATISTICS_STYLE,
    )
    splits: list[str] = []
    features: dict[str, dict] = {}
    with section.reading("the statistics"):
        from tensorflow_metadata.proto.v0 import statistics_pb2

        if not view.published(Statistics):
            section.missing.append(
                view.gone(Statistics)
                or "statistics: not published (ExampleGen's job did not finish)"
            )
            return section
        root = view.path(Statistics)
        found = sorted(
            (d.rstrip("/") for d in fileio.listdir(root) if fileio.isdir(fileio.join(root, d))),
            key=split_order,
        )
        for split in found:
            stats = statistics_pb2.DatasetFeatureStatisticsList()
            with fileio.open(fileio.join(root, split, "FeatureStats.pb"), "rb") as f:
                stats.ParseFromString(f.read())
            if not stats.datasets:
                continue
            splits.append(split)
            dataset = stats.datasets[0]
            for feature in dataset.features:
                name = ".".join(feature.path.step) or feature.name
                kind = statistics_pb2.FeatureNameStatistics.Type.Name(feature.type)
                entry = features.setdefault(name, {"type": kind, "splits": {}})
                entry["splits"][split] = _feature_stats(feature, dataset.num_examples)
    if not features:
        return section
    anomalous: dict[str, list[str]] = {}
    try:  # the marks only: the Validation's section says when its file is unreadable
        rows = read_anomalies(view)[0] if view.published(Anomalies) else []
    except Exception:  # noqa: BLE001 - a report never fails the run
        rows = []
    for a in rows:
        anomalous.setdefault(a["feature"], []).append(f"{a['split']}: {a['description']}")
    for name, feature in features.items():
        worst = max((st.get("missing_pct", 0.0) for st in feature["splits"].values()), default=0)
        feature["sort_key"] = (name not in anomalous, -worst, name)
    hist = {
        name: overlaid_histograms(
            {
                split: stats.get("histogram") or []
                for split, stats in feature["splits"].items()
                if stats.get("histogram")
            }
        )
        for name, feature in features.items()
    }
    data = {"splits": splits, "features": features, "anomalous": anomalous}
    values = {"data": data, "plots": {"hist": hist}}
    section.parts.append(Fragment("beam_pipeline.stages", "example_gen_statistics.html", values))
    return section


def _feature_stats(feature, num_examples: int) -> dict[str, Any]:
    which = feature.WhichOneof("stats")
    out: dict[str, Any] = {"kind": which}
    if which == "num_stats":
        s = feature.num_stats
        common = s.common_stats
        out.update(min=s.min, mean=s.mean, max=s.max, std=s.std_dev, zeros=s.num_zeros)
        buckets = []
        for histogram in s.histograms:
            if histogram.type == histogram.STANDARD:
                buckets = [(b.low_value, b.high_value, b.sample_count) for b in histogram.buckets]
        out["histogram"] = buckets
    elif which == "string_stats":
        s = feature.string_stats
        common = s.common_stats
        out.update(unique=s.unique, avg_length=s.avg_length)
        out["top_values"] = [(v.value, v.frequency) for v in s.top_values[:_TOP_VALUES_SHOWN]]
    elif which == "bytes_stats":
        common = feature.bytes_stats.common_stats
    else:
        common = None
    present = common.num_non_missing if common is not None else 0
    missing = common.num_missing if common is not None else 0
    total = present + missing or num_examples
    out.update(
        count=present,
        missing=missing,
        missing_pct=(100.0 * missing / total) if total else 0.0,
    )
    return out


def _rejected_section(view: ReportView) -> ReportSection:
    """The first rejected rows, each with its file, line and reason; shown after the
    anomalies (the data's problems together)."""
    section = ReportSection(
        "rejected",
        "Rejected rows",
        artifacts=(RejectedRows,),
        empty="No row was rejected.",
        after="anomalies",
    )
    with section.reading("the rejected rows"):
        if not view.published(RejectedRows):
            section.missing.append(view.gone(RejectedRows) or "rejected rows: not published")
            return section
        total, shown = 0, []
        for path in sorted(fileio.glob(view.path(RejectedRows, "rejected-*.jsonl"))):
            with fileio.open(path, "r") as f:
                for line in f:
                    if not line.strip():
                        continue
                    total += 1
                    if len(shown) < REJECTED_ROWS_SHOWN:
                        row = json.loads(line)
                        text = str(row.get("text", ""))
                        text = text if len(text) <= 200 else text[:200] + " ..."
                        where = f"{row.get('file', '?')}:{row.get('line', '?')}"
                        shown.append([Code(where), row.get("reason", ""), Code(text)])
        if shown:
            section.parts.append(Note(f"{total} rejected; the first {len(shown)}:"))
            section.parts.append(Table(["file:line", "reason", "text"], shown))
    return section
