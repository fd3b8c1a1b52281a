"""The files of a split's statistics: the ``FeatureStats.pb`` file TFX's StatisticsGen
writes (:func:`write_statistics`; ``beam_pipeline.engine.artifacts.Statistics`` reads it), and
their mergeable state, to
compute the statistics of several inputs (spans) without reading them again.

:class:`WriteStatisticsState` writes what :class:`transforms.statistics.GenerateStatistics`
combines (its accumulator: counts, moments, quantile sketches) and the exact count of every
string value (Parquet); :func:`statistics_from_states` merges the states of several inputs
into the statistics one ``GenerateStatistics`` over all of them computes: TFDV's sketches
merge, and the value counts are exact.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import pyarrow as pa
from tensorflow_metadata.proto.v0 import statistics_pb2

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from transforms.statistics import StatisticsCombineFn, _DatasetAccumulator
from transforms.top_values import (
    SumCountsFn,
    TopValuesCombineFn,
    add_top_values,
    by_feature,
    string_value_counts,
)

__all__ = [
    "WriteStatisticsState",
    "state_num_examples",
    "statistics_from_states",
    "write_statistics",
]

_ACCUMULATOR_FILE = "accumulator.pkl"
_VALUE_COUNTS = "value_counts"
_VALUE_COUNTS_SCHEMA = pa.schema(
    [("feature", pa.string()), ("value", pa.binary()), ("count", pa.int64())]
)


class _AccumulatorFn(StatisticsCombineFn):
    """The combine of :class:`GenerateStatistics` that emits its accumulator, compacted."""

    def __init__(self):
        super().__init__("state", 2, 1)

    def extract_output(self, accumulator: _DatasetAccumulator) -> _DatasetAccumulator:
        return self.compact(accumulator)


def _write_accumulator(accumulator: _DatasetAccumulator, path: str) -> None:
    import pickle

    # Pickled, as Beam moves it between workers (the tfx-bsl sketches serialise themselves
    # that way and have no other public encoding); only this pipeline writes the file, and
    # its reader checks the file's recorded digest first (engine.cache_entries).
    fileio.write_file(path, pickle.dumps(accumulator, protocol=pickle.HIGHEST_PROTOCOL))


class WriteStatisticsState(beam.PTransform[beam.PCollection[pa.RecordBatch], beam.pvalue.PDone]):
    """Writes the mergeable state of one split's statistics to ``out_dir``: the combine's
    accumulator (counts, moments, quantile sketches) and the exact count of every string
    value (Parquet). :func:`statistics_from_states` merges the states of several inputs
    into the statistics a :class:`GenerateStatistics` over all of them computes: TFDV's
    sketches merge, and the value counts are exact, so nothing is read again."""

    def __init__(self, out_dir: str):
        super().__init__()
        self._out_dir = out_dir

    def expand(self, batches):
        _ = (
            batches
            | "Accumulate" >> beam.CombineGlobally(_AccumulatorFn())
            | "WriteAccumulator"
            >> beam.Map(_write_accumulator, fileio.join(self._out_dir, _ACCUMULATOR_FILE))
        )
        _ = (
            batches
            | "CountValues"
            >> beam.FlatMap(string_value_counts).with_output_types(tuple[tuple[str, bytes], int])
            | "SumValueCounts" >> beam.CombinePerKey(SumCountsFn())
            | "AsRows" >> beam.MapTuple(lambda k, n: {"feature": k[0], "value": k[1], "count": n})
            | "WriteValueCounts"
            >> beam.io.WriteToParquet(
                fileio.join(self._out_dir, _VALUE_COUNTS),
                _VALUE_COUNTS_SCHEMA,
                file_name_suffix=".parquet",
            )
        )
        return beam.pvalue.PDone(batches.pipeline)


def state_num_examples(state_dir: str) -> int:
    """The rows a :class:`WriteStatisticsState` folder's statistics cover."""
    import pickle

    data = fileio.read_file(fileio.join(state_dir, _ACCUMULATOR_FILE), binary=True)
    return pickle.loads(data).num_examples


def statistics_from_states(
    state_dirs: Iterable[str],
    dataset_name: str,
    num_top_values: int = 20,
    num_quantiles: int = 10,
    num_histogram_buckets: int = 10,
    num_rank_histogram_buckets: int = 1000,
) -> statistics_pb2.DatasetFeatureStatisticsList:
    """The statistics of the inputs whose :class:`WriteStatisticsState` folders are
    ``state_dirs``, merged in the order given (the options as :class:`GenerateStatistics`'s).

    Raises:
      PipelineError: a state file cannot be read.
    """
    import pickle

    import pyarrow.parquet as pq

    combine_fn = StatisticsCombineFn(dataset_name, num_quantiles, num_histogram_buckets)
    accumulators = [combine_fn.create_accumulator()]
    tables = []
    for folder in state_dirs:
        path = fileio.join(folder, _ACCUMULATOR_FILE)
        try:
            accumulators.append(pickle.loads(fileio.read_file(path, binary=True)))
        except Exception as e:  # noqa: BLE001  a missing or damaged file
            raise PipelineError(
                f"Statistics state {path} cannot be read ({e}); delete its folder and run "
                "again to compute it anew."
            ) from e
        for part in fileio.glob(fileio.join(folder, _VALUE_COUNTS + "*.parquet")):
            with fileio.open(part, "rb") as f:
                tables.append(pq.read_table(f, schema=_VALUE_COUNTS_SCHEMA))
    stats = combine_fn.extract_output(combine_fn.merge_accumulators(accumulators))
    counts: dict[tuple[str, bytes], int] = {}
    for table in tables:
        for feature, value, n in zip(
            table.column("feature").to_pylist(),
            table.column("value").to_pylist(),
            table.column("count").to_pylist(),
            strict=True,
        ):
            key = (feature, value)
            counts[key] = counts.get(key, 0) + n
    top_fn = TopValuesCombineFn(max(num_top_values, num_rank_histogram_buckets))
    tops: dict[str, list] = {}
    for key, n in counts.items():
        feature, pair = by_feature(key, n)
        tops[feature] = top_fn.add_input(tops.get(feature) or top_fn.create_accumulator(), pair)
    topby_feature = {f: top_fn.extract_output(acc) for f, acc in tops.items()}
    return add_top_values(stats, topby_feature, num_top_values, num_rank_histogram_buckets)


def write_statistics(stats: statistics_pb2.DatasetFeatureStatisticsList, path: str) -> None:
    """Writes ``stats`` as one binary proto file (TFX's ``FeatureStats.pb`` layout).

    TFDV's ``load_stats_binary`` and Facets read the file; ``gs://`` paths work.

    Args:
      stats: the statistics to write.
      path: the file to create or overwrite; its folder is created when missing.

    Raises:
      TypeError: ``stats`` is not a DatasetFeatureStatisticsList.
    """
    if not isinstance(stats, statistics_pb2.DatasetFeatureStatisticsList):
        raise TypeError(
            f"write_statistics takes a DatasetFeatureStatisticsList, got {type(stats).__name__}."
        )
    fileio.write_file(path, stats.SerializeToString())
