"""Reading one split's statistics proto, as schema inference and validation both do.

A ``DatasetFeatureStatisticsList`` (what :class:`transforms.statistics.GenerateStatistics`
writes, and TFDV) is read through these functions: its one dataset, a feature's name
(its path), its common statistics whatever its type, and its string values with counts.

Example::

    dataset = single_dataset(stats, "stats", "infer_schema")
    for feature in dataset.features:
        print(feature_name(feature), common_stats(feature).num_missing)
"""

from __future__ import annotations

from tensorflow_metadata.proto.v0 import statistics_pb2

__all__ = ["common_stats", "feature_name", "single_dataset", "string_values"]


def feature_name(feature: statistics_pb2.FeatureNameStatistics) -> str:
    """The feature's name: its path joined with dots, or its legacy ``name``."""
    return ".".join(feature.path.step) if feature.path.step else feature.name


def common_stats(feature: statistics_pb2.FeatureNameStatistics) -> statistics_pb2.CommonStatistics:
    """The feature's CommonStatistics (empty for a STRUCT feature or no statistics)."""
    which = feature.WhichOneof("stats")
    if which is None or which == "struct_stats":
        return statistics_pb2.CommonStatistics()
    return getattr(feature, which).common_stats


def string_values(feature: statistics_pb2.FeatureNameStatistics) -> dict[str, float]:
    """Value -> count from the rank histogram (or the top values when there is none)."""
    if feature.WhichOneof("stats") != "string_stats":
        return {}
    string_stats = feature.string_stats
    if string_stats.rank_histogram.buckets:
        return {b.label: b.sample_count for b in string_stats.rank_histogram.buckets}
    return {v.value: v.frequency for v in string_stats.top_values}


def single_dataset(
    stats: statistics_pb2.DatasetFeatureStatisticsList, argument: str, function: str
) -> statistics_pb2.DatasetFeatureStatistics:
    """The one dataset (split) of ``stats``, checked.

    Args:
      stats: the statistics.
      argument, function: the caller's argument and function, named in the errors.

    Raises:
      TypeError: ``stats`` is not a DatasetFeatureStatisticsList.
      ValueError: ``stats`` does not hold exactly one dataset.
    """
    if not isinstance(stats, statistics_pb2.DatasetFeatureStatisticsList):
        raise TypeError(
            f"{function} takes a DatasetFeatureStatisticsList as {argument}, got "
            f"{type(stats).__name__}."
        )
    if len(stats.datasets) != 1:
        raise ValueError(
            f"{function} needs {argument} with exactly one dataset (one split), got "
            f"{len(stats.datasets)}; compute statistics per split."
        )
    return stats.datasets[0]
