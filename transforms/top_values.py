"""The exact top values of string features, as TFDV's TopKUniques generator computes them.

Each batch's values are counted with pyarrow (``value_counts``), the counts are summed per
(feature, value) with a ``CombinePerKey`` (lifted, so each worker pre-sums its share before
the shuffle), then one ``CombinePerKey`` per feature keeps the number of distinct values and
the most frequent ones. The keys spread over the workers, so no worker holds all the
distinct values of a feature and the counts stay exact at any cardinality (a sketch's were
not: a column of unique ids got a distinct count above its row count and top-value counts
of 4 for values seen once). :mod:`transforms.statistics` runs these on a split's batches;
:mod:`transforms.statistics_files` merges the counts of several inputs with the same ones.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Mapping

import apache_beam as beam
import pyarrow as pa
import pyarrow.compute as pc
from tensorflow_metadata.proto.v0 import statistics_pb2

__all__ = [
    "SumCountsFn",
    "TopValuesCombineFn",
    "add_top_values",
    "by_feature",
    "is_string_type",
    "string_value_counts",
]

# TFDV's placeholders in top values / rank histograms for values it cannot show as text.
_INVALID_UTF8_PLACEHOLDER = "__BYTES_VALUE__"
_LARGE_BYTES_PLACEHOLDER = "__LARGE_BYTES__"
_LARGE_BYTES_THRESHOLD = 1024


class SumCountsFn(beam.CombineFn):
    """Sums a value's counts (an int accumulator, encoded as a varint between workers)."""

    def create_accumulator(self) -> int:
        return 0

    def add_input(self, accumulator: int, count: int) -> int:
        return accumulator + count

    def merge_accumulators(self, accumulators: Iterable[int]) -> int:
        return sum(accumulators)

    def extract_output(self, accumulator: int) -> int:
        return accumulator

    def get_accumulator_coder(self):
        return beam.coders.VarIntCoder()


def by_feature(key: tuple[str, bytes], count: int) -> tuple[str, tuple[int, bytes]]:
    return key[0], (count, key[1])


def _rank_key(pair: tuple[int, bytes]) -> tuple[int, bytes]:
    """Most frequent first; equal counts in byte order of the value."""
    return -pair[0], pair[1]


class TopValuesCombineFn(beam.CombineFn):
    """(count, value) pairs of one feature's distinct values -> (distinct count, top pairs).

    Beam's ``Top`` and ``Count`` combiners would take two combines (two shuffles of every
    distinct value) where this one takes one. The top pairs are the ``num_top`` first in
    ``_rank_key`` order. The accumulator is [distinct count, pairs]; the pairs are cut
    back to the ``num_top`` best whenever they reach twice that, so adding costs an append.
    """

    def __init__(self, num_top: int):
        self._num_top = num_top

    def create_accumulator(self) -> list:
        return [0, []]

    def add_input(self, accumulator: list, pair: tuple[int, bytes]) -> list:
        accumulator[0] += 1
        pairs = accumulator[1]
        pairs.append(pair)
        if len(pairs) >= 2 * self._num_top:
            accumulator[1] = heapq.nsmallest(self._num_top, pairs, key=_rank_key)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[list]) -> list:
        unique, pairs = 0, []
        for other_unique, other_pairs in accumulators:
            unique += other_unique
            pairs.extend(other_pairs)
        return [unique, heapq.nsmallest(self._num_top, pairs, key=_rank_key)]

    def extract_output(self, accumulator: list) -> tuple[int, list[tuple[int, bytes]]]:
        return accumulator[0], sorted(accumulator[1], key=_rank_key)[: self._num_top]


def _value_label(value: bytes) -> str:
    """A value as top values and rank histograms show it (TFDV's placeholders otherwise)."""
    if len(value) > _LARGE_BYTES_THRESHOLD:
        return _LARGE_BYTES_PLACEHOLDER
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return _INVALID_UTF8_PLACEHOLDER


def add_top_values(
    stats: statistics_pb2.DatasetFeatureStatisticsList,
    topby_feature: Mapping[str, tuple[int, list[tuple[int, bytes]]]],
    num_top_values: int,
    num_rank_histogram_buckets: int,
) -> statistics_pb2.DatasetFeatureStatisticsList:
    """``stats`` with each string feature's unique count, top values and rank histogram."""
    result = statistics_pb2.DatasetFeatureStatisticsList()
    result.CopyFrom(stats)  # a Beam input element must not be modified
    for feature in result.datasets[0].features:
        top = topby_feature.get(feature.path.step[0])
        if feature.type != statistics_pb2.FeatureNameStatistics.STRING or top is None:
            continue
        unique, pairs = top
        proto = feature.string_stats
        proto.unique = unique
        for rank, (count, value) in enumerate(pairs):
            label = _value_label(value)
            if rank < num_top_values:
                proto.top_values.add(value=label, frequency=count)
            if rank < num_rank_histogram_buckets:
                proto.rank_histogram.buckets.add(
                    low_rank=rank, high_rank=rank, label=label, sample_count=count
                )
    return result


def string_value_counts(batch: pa.RecordBatch) -> Iterator[tuple[tuple[str, bytes], int]]:
    """((feature, value), count) for each distinct value of each string feature of a batch.

    Counting per batch with pyarrow first means one element per distinct value per batch
    reaches Beam, not one per value (TFDV's TopKUniques generator does the same).
    """
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if not _is_string_list(column.type):
            continue  # the statistics' combine names a column of an unsupported type
        values = column.flatten()
        if values.null_count:
            values = values.drop_null()
        if len(values) == 0:
            continue
        # Keys are bytes whatever the Arrow type, so a feature read as string in one file
        # and as binary in another counts each value once (views copy nothing).
        if pa.types.is_string(values.type):
            values = values.view(pa.binary())
        elif pa.types.is_large_string(values.type):
            values = values.view(pa.large_binary())
        counted = pc.value_counts(values)
        yield from zip(
            zip(itertools.repeat(name), counted.field(0).to_pylist()),
            counted.field(1).to_pylist(),
        )


def is_string_type(value_type: pa.DataType) -> bool:
    """Bytes or strings: a STRING feature's values (binary data counts as STRING, as in
    TFDV). :mod:`transforms.statistics` types its columns with it too."""
    return (
        pa.types.is_binary(value_type)
        or pa.types.is_large_binary(value_type)
        or pa.types.is_string(value_type)
        or pa.types.is_large_string(value_type)
    )


def _is_string_list(column_type: pa.DataType) -> bool:
    return (
        pa.types.is_list(column_type) or pa.types.is_large_list(column_type)
    ) and is_string_type(column_type.value_type)
