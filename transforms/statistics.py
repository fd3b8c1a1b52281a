"""Dataset statistics as tensorflow_metadata protos, computed in one streaming pass.

``GenerateStatistics`` turns a PCollection of Arrow RecordBatches (one split) into exactly
one ``DatasetFeatureStatisticsList`` holding one dataset, the proto TFDV and Facets read.
It is two combines over the same batches, joined at the end:

* a ``beam.CombineGlobally`` of everything but the string values' counts: each batch is
  summarised with vectorised pyarrow/numpy code and tfx-bsl sketches, so a worker's
  memory depends on the number of features, never on the number of rows;
* the exact count of every string value, as TFDV's TopKUniques generator does it
  (:mod:`transforms.top_values`).

Per feature it computes what TFDV's basic statistics hold:

* ``CommonStatistics``: present/missing counts, min/max/avg/total number of values per
  row and a quantiles histogram of the number of values.
* INT and FLOAT features (``num_stats``): min, max, mean, population std_dev (over the
  finite values; merged with Chan's parallel formula), num_zeros, median, a standard
  (equal-width) and a quantiles histogram. Both histograms come from a tfx-bsl
  ``QuantilesSketch`` (rank error ``_QUANTILES_EPS``), as in TFDV; NaNs are counted in
  ``num_nan`` and left out of everything else.
* STRING features (``string_stats``; binary data is reported as STRING, as TFDV does):
  the exact distinct count, top values and rank histogram with exact counts (most
  frequent first; equal counts in byte order of the value; a value that is not UTF-8
  text, or longer than 1 KiB, is listed under TFDV's placeholder label), average length
  in bytes and the count of values that are not valid UTF-8.

A column missing from a batch counts as missing in that batch's rows, and a null list as
missing in its row; an empty list is present with zero values.

Around this module: :mod:`transforms.histograms` (the histograms from the sketches) and
:mod:`transforms.statistics_files` (the ``FeatureStats.pb`` file; the mergeable state).

Example::

    with beam.Pipeline() as p:
        stats = (
            p
            | "ReadBatches" >> beam.Create(record_batches)
            | "Stats" >> GenerateStatistics(dataset_name="train"))
        _ = stats | "Write" >> beam.Map(write_statistics, "out/Split-train/FeatureStats.pb")

    # read back by beam_pipeline.engine.artifacts.Statistics, or tfdv.load_stats_binary
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable
from typing import Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx_bsl import sketches

from beam_pipeline.core.errors import PipelineError
from transforms.histograms import (
    CDF_STAT,
    equi_width_histogram,
    quantile_buckets,
    quantiles_histogram,
)
from transforms.metrics import NAMESPACE
from transforms.top_values import (
    SumCountsFn,
    TopValuesCombineFn,
    add_top_values,
    by_feature,
    is_string_type,
    string_value_counts,
)

__all__ = [
    "CDF_STAT",
    "GenerateStatistics",
    "StatisticsCombineFn",
]

# Rank error of the numeric quantiles sketch (TFDV's default): a reported quantile's rank
# is within 1% of the number of values of the true one.
_QUANTILES_EPS = 0.01
_QUANTILES_MAX_ELEMENTS = 2**32

_Type = statistics_pb2.FeatureNameStatistics.Type
_Histogram = statistics_pb2.Histogram


class _Kind(enum.Enum):
    """The statistics kind of a column's values, from its Arrow type."""

    INT = _Type.INT
    FLOAT = _Type.FLOAT
    STRING = _Type.STRING


def _kind_of(feature: str, column_type: pa.DataType) -> Optional[_Kind]:
    """The kind of a list column's values; None when its values are all null (``null``)."""
    if not (pa.types.is_list(column_type) or pa.types.is_large_list(column_type)):
        raise PipelineError(
            f"Feature {feature!r} has Arrow type {column_type}; statistics need list<...> or "
            "large_list<...> columns of integers, floats or bytes/strings (decode the data "
            "with a tfx-bsl TFXIO or ExampleGen)."
        )
    value_type = column_type.value_type
    if pa.types.is_integer(value_type):
        return _Kind.INT
    if pa.types.is_floating(value_type):
        return _Kind.FLOAT
    if is_string_type(value_type):
        return _Kind.STRING
    if pa.types.is_null(value_type):
        return None
    raise PipelineError(
        f"Feature {feature!r} has values of Arrow type {value_type}; statistics support only "
        "integer, floating point and bytes/string values (flatten or drop that feature)."
    )


def _new_quantiles_sketch() -> sketches.QuantilesSketch:
    return sketches.QuantilesSketch(_QUANTILES_EPS, _QUANTILES_MAX_ELEMENTS, 1)


def _merge_moments(
    n_a: int, mean_a: float, m2_a: float, n_b: int, mean_b: float, m2_b: float
) -> tuple[int, float, float]:
    """Chan et al.'s parallel merge of (count, mean, sum of squared deviations)."""
    if n_b == 0:
        return n_a, mean_a, m2_a
    if n_a == 0:
        return n_b, mean_b, m2_b
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * n_b / n, m2_a + m2_b + delta * delta * n_a * n_b / n


class _FeatureAccumulator:
    """Running statistics of one feature; its size does not depend on the row count.

    The tfx-bsl sketches pickle themselves (their ``__getstate__`` serialises them), so
    the accumulator can cross process boundaries as is.
    """

    __slots__ = (
        "kind",
        "num_non_missing",
        "min_num_values",
        "max_num_values",
        "tot_num_values",
        "num_items",
        "num_values_sketch",
        # Numeric features.
        "num_nan",
        "num_zeros",
        "num_pos_inf",
        "num_neg_inf",
        "min",
        "max",
        "finite_count",
        "finite_min",
        "finite_max",
        "mean",
        "m2",
        "values_sketch",
        # String features.
        "total_length",
        "invalid_utf8_count",
    )

    def __init__(self) -> None:
        self.kind: Optional[_Kind] = None
        self.num_non_missing = 0
        self.min_num_values: Optional[int] = None
        self.max_num_values: Optional[int] = None
        self.tot_num_values = 0
        # Non-null values (null items inside a list are counted by tot_num_values only).
        self.num_items = 0
        self.num_values_sketch = _new_quantiles_sketch()
        self.num_nan = 0
        self.num_zeros = 0
        self.num_pos_inf = 0
        self.num_neg_inf = 0
        self.min = math.inf
        self.max = -math.inf
        self.finite_count = 0
        self.finite_min = math.inf
        self.finite_max = -math.inf
        self.mean = 0.0
        self.m2 = 0.0
        self.values_sketch: Optional[sketches.QuantilesSketch] = None
        self.total_length = 0
        self.invalid_utf8_count = 0

    def __getstate__(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict) -> None:
        for name, value in state.items():
            setattr(self, name, value)


class _DatasetAccumulator:
    """Running statistics of one split: the row count and one accumulator per feature."""

    __slots__ = ("num_examples", "features")

    def __init__(self) -> None:
        self.num_examples = 0
        self.features: dict[str, _FeatureAccumulator] = {}

    def __getstate__(self) -> dict:
        return {"num_examples": self.num_examples, "features": self.features}

    def __setstate__(self, state: dict) -> None:
        self.num_examples = state["num_examples"]
        self.features = state["features"]


class StatisticsCombineFn(beam.CombineFn):
    """Combines RecordBatches into one DatasetFeatureStatisticsList.

    Everything but the string values' counts (``unique``, ``top_values``,
    ``rank_histogram``), which :func:`add_top_values` adds from the per-value combine.
    """

    def __init__(self, dataset_name: str, num_quantiles: int, num_histogram_buckets: int):
        self._dataset_name = dataset_name
        self._num_quantiles = num_quantiles
        self._num_histogram_buckets = num_histogram_buckets
        self._rows = beam.metrics.Metrics.counter(NAMESPACE, "statistics.rows")
        self._batches = beam.metrics.Metrics.counter(NAMESPACE, "statistics.batches")

    # ----------------------------------------------------------------- accumulation

    def create_accumulator(self) -> _DatasetAccumulator:
        return _DatasetAccumulator()

    def add_input(self, accumulator: _DatasetAccumulator, batch: pa.RecordBatch):
        if not isinstance(batch, pa.RecordBatch):
            raise TypeError(
                f"GenerateStatistics takes a PCollection of pyarrow.RecordBatch, got a "
                f"{type(batch).__name__}; decode the examples with a tfx-bsl TFXIO first."
            )
        accumulator.num_examples += batch.num_rows
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            feature = accumulator.features.get(name)
            if feature is None:
                feature = accumulator.features[name] = _FeatureAccumulator()
            self._add_column(name, feature, column)
        self._rows.inc(batch.num_rows)
        self._batches.inc()
        return accumulator

    def _add_column(self, name: str, feature: _FeatureAccumulator, column: pa.Array) -> None:
        kind = _kind_of(name, column.type)
        self._set_kind(name, feature, kind)
        num_present = len(column) - column.null_count
        if num_present == 0:
            return
        feature.num_non_missing += num_present
        lengths = pc.list_value_length(column)
        if lengths.null_count:
            lengths = lengths.drop_null()
        lengths = lengths.to_numpy().astype(np.int64, copy=False)
        lo, hi = int(lengths.min()), int(lengths.max())
        feature.min_num_values = (
            lo if feature.min_num_values is None else min(feature.min_num_values, lo)
        )
        feature.max_num_values = (
            hi if feature.max_num_values is None else max(feature.max_num_values, hi)
        )
        feature.tot_num_values += int(lengths.sum())
        # Rows have few distinct value counts: add (count, number of rows) pairs.
        if hi <= 16 * len(lengths) + 1024:
            counts = np.bincount(lengths)
            distinct = np.flatnonzero(counts)
            weights = counts[distinct].astype(np.float64)
        else:
            distinct, counts = np.unique(lengths, return_counts=True)
            weights = counts.astype(np.float64)
        feature.num_values_sketch.AddValues(
            pa.array(distinct.astype(np.float64)), pa.array(weights)
        )

        values = column.flatten()
        if values.null_count:
            values = values.drop_null()
        if len(values) == 0 or kind is None:
            return
        feature.num_items += len(values)
        if kind is _Kind.STRING:
            self._add_strings(feature, values)
        else:
            self._add_numbers(feature, values)

    def _set_kind(self, name: str, feature: _FeatureAccumulator, kind: Optional[_Kind]):
        if kind is None or feature.kind is kind:
            return
        if feature.kind is not None:
            raise PipelineError(
                f"Feature {name!r} has {feature.kind.name} values in some record batches and "
                f"{kind.name} values in others; give the feature one type in every input "
                "file (or cast it in the data) before computing statistics."
            )
        feature.kind = kind
        if kind is not _Kind.STRING:
            feature.values_sketch = _new_quantiles_sketch()

    @staticmethod
    def _add_numbers(feature: _FeatureAccumulator, values: pa.Array) -> None:
        # The sketch skips NaNs itself and takes the Arrow array without a copy.
        feature.values_sketch.AddValues(values)
        array = values.to_numpy(zero_copy_only=False)
        if feature.kind is _Kind.FLOAT:
            nan = np.isnan(array)
            num_nan = int(np.count_nonzero(nan))
            if num_nan:
                feature.num_nan += num_nan
                array = array[~nan]
            if array.size == 0:
                return
        feature.num_zeros += int(np.count_nonzero(array == 0))
        feature.min = min(feature.min, float(array.min()))
        feature.max = max(feature.max, float(array.max()))
        finite = array.astype(np.float64, copy=False)
        if feature.kind is _Kind.FLOAT:
            is_finite = np.isfinite(finite)
            if not is_finite.all():
                feature.num_pos_inf += int(np.count_nonzero(np.isposinf(finite)))
                feature.num_neg_inf += int(np.count_nonzero(np.isneginf(finite)))
                finite = finite[is_finite]
        if finite.size == 0:
            return
        # Values near the float limits overflow to an infinite std_dev, as numpy's does.
        with np.errstate(over="ignore", invalid="ignore"):
            batch_mean = float(finite.mean())
            deviations = finite - batch_mean
            batch_m2 = float(np.dot(deviations, deviations))
        feature.finite_min = min(feature.finite_min, float(finite.min()))
        feature.finite_max = max(feature.finite_max, float(finite.max()))
        feature.finite_count, feature.mean, feature.m2 = _merge_moments(
            feature.finite_count, feature.mean, feature.m2, finite.size, batch_mean, batch_m2
        )

    @staticmethod
    def _add_strings(feature: _FeatureAccumulator, values: pa.Array) -> None:
        feature.total_length += pc.sum(pc.binary_length(values)).as_py() or 0
        if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
            text_type = pa.string() if pa.types.is_binary(values.type) else pa.large_string()
            try:
                values.view(text_type).validate(full=True)
            except pa.ArrowInvalid:
                feature.invalid_utf8_count += _count_invalid_utf8(values)

    # ----------------------------------------------------------------------- merging

    def merge_accumulators(
        self, accumulators: Iterable[_DatasetAccumulator]
    ) -> _DatasetAccumulator:
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for other in accumulators:
            merged.num_examples += other.num_examples
            for name, feature in other.features.items():
                mine = merged.features.get(name)
                if mine is None:
                    merged.features[name] = feature
                else:
                    self._merge_feature(name, mine, feature)
        return merged

    def _merge_feature(
        self, name: str, mine: _FeatureAccumulator, other: _FeatureAccumulator
    ) -> None:
        if other.kind is not None and mine.kind is None:
            mine.kind = other.kind
            mine.values_sketch = other.values_sketch
        elif other.kind is not None:
            self._set_kind(name, mine, other.kind)  # raises on INT vs FLOAT etc.
            if other.values_sketch is not None:
                mine.values_sketch.Merge(other.values_sketch)
        mine.num_non_missing += other.num_non_missing
        if other.min_num_values is not None:
            mine.min_num_values = (
                other.min_num_values
                if mine.min_num_values is None
                else min(mine.min_num_values, other.min_num_values)
            )
            mine.max_num_values = (
                other.max_num_values
                if mine.max_num_values is None
                else max(mine.max_num_values, other.max_num_values)
            )
        mine.tot_num_values += other.tot_num_values
        mine.num_items += other.num_items
        mine.num_values_sketch.Merge(other.num_values_sketch)
        mine.num_nan += other.num_nan
        mine.num_zeros += other.num_zeros
        mine.num_pos_inf += other.num_pos_inf
        mine.num_neg_inf += other.num_neg_inf
        mine.min = min(mine.min, other.min)
        mine.max = max(mine.max, other.max)
        mine.finite_min = min(mine.finite_min, other.finite_min)
        mine.finite_max = max(mine.finite_max, other.finite_max)
        mine.finite_count, mine.mean, mine.m2 = _merge_moments(
            mine.finite_count, mine.mean, mine.m2, other.finite_count, other.mean, other.m2
        )
        mine.total_length += other.total_length
        mine.invalid_utf8_count += other.invalid_utf8_count

    def compact(self, accumulator: _DatasetAccumulator) -> _DatasetAccumulator:
        # Shrinks the quantiles sketches (up to ~16x) before they are shuffled.
        for feature in accumulator.features.values():
            feature.num_values_sketch.Compact()
            if feature.values_sketch is not None:
                feature.values_sketch.Compact()
        return accumulator

    # ------------------------------------------------------------------------ output

    def extract_output(
        self, accumulator: _DatasetAccumulator
    ) -> statistics_pb2.DatasetFeatureStatisticsList:
        result = statistics_pb2.DatasetFeatureStatisticsList()
        dataset = result.datasets.add(
            name=self._dataset_name, num_examples=accumulator.num_examples
        )
        for name in sorted(accumulator.features):
            self._feature_proto(
                name, accumulator.features[name], accumulator.num_examples, dataset.features.add()
            )
        return result

    def _feature_proto(
        self,
        name: str,
        feature: _FeatureAccumulator,
        num_examples: int,
        proto: statistics_pb2.FeatureNameStatistics,
    ) -> None:
        proto.path.step.append(name)
        # A feature never seen with a typed value (only null-typed columns) is reported as
        # STRING with common statistics only: nothing can be said about its values.
        kind = feature.kind or _Kind.STRING
        proto.type = kind.value
        if kind is _Kind.STRING:
            common = proto.string_stats.common_stats
            self._string_stats(feature, proto.string_stats)
        else:
            common = proto.num_stats.common_stats
            self._numeric_stats(feature, proto.num_stats)
            if feature.values_sketch is not None and feature.num_items > feature.num_nan:
                proto.custom_stats.add(
                    name=CDF_STAT, histogram=quantile_buckets(feature.values_sketch)
                )
        common.num_non_missing = feature.num_non_missing
        common.num_missing = num_examples - feature.num_non_missing
        common.tot_num_values = feature.tot_num_values
        if feature.num_non_missing:
            common.min_num_values = feature.min_num_values
            common.max_num_values = feature.max_num_values
            common.avg_num_values = feature.tot_num_values / feature.num_non_missing
            common.num_values_histogram.CopyFrom(
                quantiles_histogram(
                    feature.num_values_sketch, self._num_quantiles, feature.num_non_missing
                )
            )

    def _numeric_stats(
        self, feature: _FeatureAccumulator, proto: statistics_pb2.NumericStatistics
    ) -> None:
        proto.num_zeros = feature.num_zeros
        num_values = feature.num_items - feature.num_nan
        if num_values > 0:
            proto.min = feature.min
            proto.max = feature.max
        if feature.finite_count:
            proto.mean = feature.mean
            proto.std_dev = math.sqrt(max(feature.m2, 0.0) / feature.finite_count)
        standard = proto.histograms.add(type=_Histogram.STANDARD, num_nan=feature.num_nan)
        quantiles = proto.histograms.add(type=_Histogram.QUANTILES, num_nan=feature.num_nan)
        if num_values <= 0 or feature.values_sketch is None:
            return
        median = feature.values_sketch.GetQuantiles(2).flatten().to_numpy()
        proto.median = float(median[1])
        quantiles.MergeFrom(
            quantiles_histogram(feature.values_sketch, self._num_quantiles, num_values)
        )
        standard.MergeFrom(equi_width_histogram(feature, self._num_histogram_buckets, num_values))

    def _string_stats(
        self, feature: _FeatureAccumulator, proto: statistics_pb2.StringStatistics
    ) -> None:
        if feature.num_items:
            proto.avg_length = feature.total_length / feature.num_items
        proto.invalid_utf8_count = feature.invalid_utf8_count


def _count_invalid_utf8(values: pa.Array) -> int:
    """Values that are not valid UTF-8 (only called for batches known to hold some)."""
    counted = pc.value_counts(values)
    invalid = 0
    for value, count in zip(
        counted.field(0).to_pylist(), counted.field(1).to_pylist(), strict=True
    ):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            invalid += count
    return invalid


class GenerateStatistics(
    beam.PTransform[
        beam.PCollection[pa.RecordBatch],
        beam.PCollection[statistics_pb2.DatasetFeatureStatisticsList],
    ]
):
    """Computes TFDV-style statistics of one split: one streaming combine, plus exact
    per-value counts of the string features (a combine per value, then per feature).

    Emits exactly one ``DatasetFeatureStatisticsList`` with one dataset named
    ``dataset_name`` (``num_examples: 0`` and no features for an empty input).
    """

    def __init__(
        self,
        dataset_name: str,
        num_top_values: int = 20,
        num_quantiles: int = 10,
        num_histogram_buckets: int = 10,
        *,
        num_rank_histogram_buckets: int = 1000,
    ):
        """Checks the options.

        Args:
          dataset_name: the dataset's name in the proto (the split, e.g. ``train``).
          num_top_values: most frequent values listed in ``top_values`` of STRING features.
          num_quantiles: buckets of the QUANTILES histograms (values and values per row).
          num_histogram_buckets: buckets of the STANDARD (equal-width) histogram.
          num_rank_histogram_buckets: most frequent values in the rank histogram of STRING
            features, which schema inference reads string domains from (TFDV's default).

        Raises:
          ValueError: an option is out of range.
        """
        super().__init__()
        if not isinstance(dataset_name, str) or not dataset_name:
            raise ValueError(f"dataset_name must be a non-empty string, got {dataset_name!r}.")
        for option, value, minimum in (
            ("num_top_values", num_top_values, 1),
            ("num_quantiles", num_quantiles, 2),
            ("num_histogram_buckets", num_histogram_buckets, 1),
            ("num_rank_histogram_buckets", num_rank_histogram_buckets, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"{option} must be an integer >= {minimum}, got {value!r}.")
        self._combine_fn = StatisticsCombineFn(
            dataset_name=dataset_name,
            num_quantiles=num_quantiles,
            num_histogram_buckets=num_histogram_buckets,
        )
        self._num_top_values = num_top_values
        self._num_rank_histogram_buckets = num_rank_histogram_buckets

    def expand(
        self, batches: beam.PCollection[pa.RecordBatch]
    ) -> beam.PCollection[statistics_pb2.DatasetFeatureStatisticsList]:
        stats = batches | "CombineStatistics" >> beam.CombineGlobally(
            self._combine_fn
        ).with_output_types(statistics_pb2.DatasetFeatureStatisticsList)
        top_values = (
            batches
            | "CountValues"
            >> beam.FlatMap(string_value_counts).with_output_types(tuple[tuple[str, bytes], int])
            | "SumValueCounts" >> beam.CombinePerKey(SumCountsFn())
            | "KeyByFeature" >> beam.MapTuple(by_feature)
            | "TopValues"
            >> beam.CombinePerKey(
                TopValuesCombineFn(max(self._num_top_values, self._num_rank_histogram_buckets))
            )
        )
        return stats | "AddTopValues" >> beam.Map(
            add_top_values,
            beam.pvalue.AsDict(top_values),
            self._num_top_values,
            self._num_rank_histogram_buckets,
        ).with_output_types(statistics_pb2.DatasetFeatureStatisticsList)
