"""The ExampleGen+Statistics stage's declaration: where the input data is and how it is
read, split and checked (:class:`DataConfig`), and the stage (one Beam job: the data is read
once). Its work is in ``executor.py``, its report sections in ``report.py``: both are
imported where a hook runs, so ``--help`` and ``runs`` load neither."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.core.types import DEFAULT_CSV_MAX_FIELD_BYTES, DataFormat, Split
from beam_pipeline.engine.artifacts import Examples, RejectedRows, Statistics
from beam_pipeline.engine.config import PipelineConfig, check_int
from beam_pipeline.engine.stage import InputData, Stage, StageContext

if TYPE_CHECKING:
    from beam_pipeline.engine.history_entry import HistoryEntry
    from beam_pipeline.engine.report_sections import ReportSection, ReportView
    from beam_pipeline.engine.summary import StageReport
    from beam_pipeline.stages.example_gen.executor import PreparedData

__all__ = ["DataConfig", "ExampleGenStage"]


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


# The span specs of --data (transforms.example_gen.input_files), which --input_splits
# does not read.
_SPAN_SPECS = ("{SPAN}", "{VERSION}", "{YYYY}", "{MM}", "{DD}")


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
        takes=(dict,),
    )
    input_splits: tuple[tuple[Split, str], ...] = setting(
        (),
        flag="input_splits",
        help="Input already split: train=PATTERN,eval=PATTERN.",
        parse=_split_pairs("input_splits", str),
        takes=(dict,),
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
        if self.spans is not None and self.span_window != 1:
            raise PipelineError(
                f"--spans={self.spans[0]}:{self.spans[1]} and --span_window={self.span_window} "
                "both choose the spans to read; pass one of them (--spans FIRST:LAST, or "
                "--span_window N for the N latest)."
            )
        for split, pattern in self.input_splits:
            spec = next((s for s in _SPAN_SPECS if s in pattern), None)
            if spec is not None:
                raise PipelineError(
                    f"--input_splits {split.value}={pattern} has {spec}, which only --data "
                    "reads; name each split's files without it, or pass the spans as --data "
                    "and split them with --split_buckets."
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
    description = (
        "reads CSV (typed per column, compressed or not) or TFRecord; hash split; bad rows to "
        "a rejected-rows artifact; per split, TFDV's `DatasetFeatureStatisticsList` (exact "
        "unique counts and top values of strings, numeric quantiles and histograms as "
        "sketches) in the same pass: Beam job 1"
    )
    Config = DataConfig
    config_key = "data"
    reads_input_data = True
    outputs = (RejectedRows, Examples, Statistics)
    reads = ("schema.file",)  # a --schema types the CSV columns it reads

    def prepare(self, config: PipelineConfig, options: Any) -> PreparedData:
        """The input files resolved and checked (format, CSV header), their content
        fingerprinted, and the ``--schema`` that types the columns read."""
        from beam_pipeline.stages.example_gen import executor

        return executor.prepare(config)

    def input_data(self, prepared: PreparedData) -> InputData:
        return InputData(prepared.uri, prepared.inputs.fingerprint)

    def parameters(self, ctx: StageContext) -> dict:
        return {"data": ctx.prepared(self).inputs.fingerprint}

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """The statistics per feature and split (anomalous features marked) and the first
        rejected rows."""
        from beam_pipeline.stages.example_gen import report

        return [report.statistics_section(view), report.rejected_section(view)]

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        # With a {SPAN} input: the spans the examples hold and those reused, not read
        # (keys of runs list --json; a line of runs show).
        from beam_pipeline.engine.history_entry import HistoryEntry
        from beam_pipeline.stages.common.span_cache import span_label

        details = reports[0].details if reports else {}
        spans, reused = details.get("spans"), details.get("spans_reused") or []
        if not spans:
            return HistoryEntry()
        line = f"Data: {span_label(spans)}" + (
            f" ({span_label(reused)} reused from earlier runs, not read)" if reused else ""
        )
        return HistoryEntry(facts={"spans": spans, "spans_reused": reused}, lines=[line])
