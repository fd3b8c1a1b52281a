"""Validation of one split's statistics against a schema (and a baseline split).

``validate_statistics`` returns a tensorflow_metadata ``Anomalies`` proto, as TFDV's
``validate_statistics`` does: ``anomaly_info`` is keyed by feature name, each
``AnomalyInfo`` has a severity, short and long descriptions and one ``reason`` per problem
with the standard ``AnomalyInfo.Type``. It detects:

================================  ================================================  ========
reason                            condition                                         severity
================================  ================================================  ========
SCHEMA_MISSING_COLUMN             a schema feature with a presence constraint is    ERROR
                                  absent from the statistics
FEATURE_TYPE_NOT_PRESENT          ... present as a column but never has a value     ERROR
FEATURE_TYPE_LOW_FRACTION_PRESENT present in fewer rows than presence.min_fraction  ERROR
                                  (a required feature with missing values)
FEATURE_TYPE_LOW_NUMBER_PRESENT   present in fewer rows than presence.min_count     ERROR
UNEXPECTED_DATA_TYPE              statistics type differs from the schema type      ERROR
FEATURE_TYPE_LOW/HIGH_NUMBER_     fewer/more values per row than value_count        ERROR
VALUES
INVALID_FEATURE_SHAPE             a ``shape`` feature that is missing or has the    ERROR
                                  wrong number of values in some row
ENUM_TYPE_UNEXPECTED_STRING_      values (from the rank histogram) outside the      ERROR
VALUES                            feature's string domain, beyond
                                  ``distribution_constraints.min_domain_mass``
INVALID_DOMAIN_SPECIFICATION      ``domain`` names no string_domain of the schema   ERROR
SCHEMA_NEW_COLUMN                 a feature with values that the schema lacks       ERROR
COMPARATOR_L_INFTY_HIGH           the fraction of rows missing the feature moved    WARNING
                                  by more than ``max_missing_fraction_jump`` from
                                  the baseline split (the L-infinity distance of
                                  the present/missing distributions)
DATASET_LOW_NUM_EXAMPLES          the split has no examples (``data_missing``)      ERROR
================================  ================================================  ========

Deprecated features (``deprecated`` or a PLANNED/ALPHA/DEPRECATED/DEBUG_ONLY lifecycle
stage) are not checked. Environments (``in_environment``) are not supported. String values
are read from the rank histogram (as TFDV does): when a feature has more distinct values
than the histogram holds (1000 by default), rare off-domain values can go unnoticed.

Example::

    anomalies = validate_statistics(eval_stats, schema, baseline_stats=train_stats)
    if is_blocking(anomalies):  # beam_pipeline.stages.validation.anomalies
        raise SystemExit(3)

It runs on the launcher after the data phase: protos in, a proto out, no Beam.
"""

from __future__ import annotations

from typing import Optional

from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2

from beam_pipeline.stages.common.feature_stats import (
    common_stats,
    feature_name,
    single_dataset,
    string_values,
)

__all__ = ["merge_anomalies", "validate_statistics"]

_Info = anomalies_pb2.AnomalyInfo
_StatsType = statistics_pb2.FeatureNameStatistics.Type
_EXPECTED_STATS_TYPES = {
    schema_pb2.INT: {_StatsType.INT},
    schema_pb2.FLOAT: {_StatsType.FLOAT},
    schema_pb2.BYTES: {_StatsType.STRING, _StatsType.BYTES},
    schema_pb2.STRUCT: {_StatsType.STRUCT},
}
_SCHEMA_TYPE_OF_STATS = {
    _StatsType.INT: "INT",
    _StatsType.FLOAT: "FLOAT",
    _StatsType.STRING: "BYTES",
    _StatsType.BYTES: "BYTES",
    _StatsType.STRUCT: "STRUCT",
}
_INACTIVE_STAGES = frozenset(
    {schema_pb2.PLANNED, schema_pb2.ALPHA, schema_pb2.DEPRECATED, schema_pb2.DEBUG_ONLY}
)
# How many off-domain values a description names.
_MAX_NAMED_VALUES = 5


def _is_deprecated(feature: schema_pb2.Feature) -> bool:
    return feature.deprecated or feature.lifecycle_stage in _INACTIVE_STAGES


def _percent(count: float, total: float) -> str:
    if total <= 0:
        return "?"
    percent = 100.0 * count / total
    return "<1%" if percent < 1.0 else f"~{int(percent)}%"


class _Reasons:
    """The anomalies found so far, grouped by feature."""

    def __init__(self) -> None:
        self.by_feature: dict[str, list[tuple[int, int, str, str]]] = {}

    def add(self, feature: str, severity: int, reason: int, short: str, long: str) -> None:
        self.by_feature.setdefault(feature, []).append((severity, reason, short, long))

    def to_proto(self, anomalies: anomalies_pb2.Anomalies) -> None:
        for feature, reasons in sorted(self.by_feature.items()):
            info = anomalies.anomaly_info[feature]
            info.path.step.append(feature)
            info.severity = max(severity for severity, _, _, _ in reasons)
            for _, reason, short, long in reasons:
                info.reason.add(type=reason, short_description=short, description=long)
            if len(reasons) == 1:
                info.short_description = reasons[0][2]
                info.description = reasons[0][3]
            else:
                info.short_description = "Multiple errors"
                info.description = " ".join(long for _, _, _, long in reasons)


def _check_presence(
    reasons: _Reasons,
    name: str,
    feature: schema_pb2.Feature,
    common: Optional[statistics_pb2.CommonStatistics],
    num_examples: int,
) -> bool:
    """Presence checks; returns whether the feature has values to check further."""
    presence = feature.presence
    required = presence.min_count > 0 or presence.min_fraction > 0
    if common is None:
        if required:
            reasons.add(
                name,
                _Info.ERROR,
                _Info.SCHEMA_MISSING_COLUMN,
                "Column dropped",
                "The feature was present in the schema but is missing from the data.",
            )
        return False
    if common.num_non_missing == 0:
        if required:
            reasons.add(
                name,
                _Info.ERROR,
                _Info.FEATURE_TYPE_NOT_PRESENT,
                "No examples contain the feature",
                "The feature is missing in every example.",
            )
        return False
    present_fraction = common.num_non_missing / num_examples
    if presence.HasField("min_fraction") and (
        present_fraction < presence.min_fraction
        or (presence.min_fraction >= 1.0 and common.num_missing > 0)
    ):
        reasons.add(
            name,
            _Info.ERROR,
            _Info.FEATURE_TYPE_LOW_FRACTION_PRESENT,
            "Column has missing values",
            f"The feature is present in {present_fraction:.2%} of the examples "
            f"({common.num_missing} missing), below the schema's presence.min_fraction "
            f"{presence.min_fraction:g}.",
        )
    if presence.HasField("min_count") and common.num_non_missing < presence.min_count:
        reasons.add(
            name,
            _Info.ERROR,
            _Info.FEATURE_TYPE_LOW_NUMBER_PRESENT,
            "Column present in too few examples",
            f"The feature is present in {common.num_non_missing} examples, below the "
            f"schema's presence.min_count {presence.min_count}.",
        )
    return True


def _check_values(
    reasons: _Reasons,
    name: str,
    feature: schema_pb2.Feature,
    common: statistics_pb2.CommonStatistics,
) -> None:
    """value_count and shape checks."""
    if feature.HasField("value_count"):
        value_count = feature.value_count
        if value_count.HasField("min") and common.min_num_values < value_count.min:
            reasons.add(
                name,
                _Info.ERROR,
                _Info.FEATURE_TYPE_LOW_NUMBER_VALUES,
                "Missing values",
                f"Some examples have fewer values than expected: "
                f"{common.min_num_values} < value_count.min {value_count.min}.",
            )
        if value_count.HasField("max") and common.max_num_values > value_count.max:
            reasons.add(
                name,
                _Info.ERROR,
                _Info.FEATURE_TYPE_HIGH_NUMBER_VALUES,
                "Superfluous values",
                f"Some examples have more values than expected: "
                f"{common.max_num_values} > value_count.max {value_count.max}.",
            )
    if feature.HasField("shape"):
        size = 1
        for dim in feature.shape.dim:
            size *= dim.size
        if common.num_missing > 0 or common.min_num_values != size or common.max_num_values != size:
            reasons.add(
                name,
                _Info.ERROR,
                _Info.INVALID_FEATURE_SHAPE,
                "Invalid shape",
                f"The schema gives the feature a fixed shape of {size} value(s), but "
                f"{common.num_missing} examples miss it and present examples have "
                f"{common.min_num_values} to {common.max_num_values} values.",
            )


def _string_domain(
    schema: schema_pb2.Schema, feature: schema_pb2.Feature, reasons: _Reasons, name: str
) -> Optional[schema_pb2.StringDomain]:
    if feature.HasField("string_domain"):
        return feature.string_domain
    if feature.WhichOneof("domain_info") != "domain":
        return None
    for domain in schema.string_domain:
        if domain.name == feature.domain:
            return domain
    reasons.add(
        name,
        _Info.ERROR,
        _Info.INVALID_DOMAIN_SPECIFICATION,
        "Missing domain",
        f"The feature's domain {feature.domain!r} is not a string_domain of the schema.",
    )
    return None


def _check_domain(
    reasons: _Reasons,
    name: str,
    schema: schema_pb2.Schema,
    feature: schema_pb2.Feature,
    feature_stats: statistics_pb2.FeatureNameStatistics,
    common: statistics_pb2.CommonStatistics,
) -> None:
    domain = _string_domain(schema, feature, reasons, name)
    if domain is None or feature_stats.type not in (_StatsType.STRING, _StatsType.BYTES):
        return
    allowed = set(domain.value)
    unseen = {v: c for v, c in string_values(feature_stats).items() if v not in allowed}
    if not unseen:
        return
    total = common.tot_num_values
    unseen_count = sum(unseen.values())
    min_mass = (
        feature.distribution_constraints.min_domain_mass
        if feature.distribution_constraints.HasField("min_domain_mass")
        else 1.0
    )
    if min_mass < 1.0 and total > 0 and unseen_count / total <= 1.0 - min_mass:
        return
    ranked = sorted(unseen.items(), key=lambda vc: (-vc[1], vc[0]))
    named = ", ".join(f"{v} ({_percent(c, total)})" for v, c in ranked[:_MAX_NAMED_VALUES])
    more = f" and {len(ranked) - _MAX_NAMED_VALUES} more" if len(ranked) > _MAX_NAMED_VALUES else ""
    reasons.add(
        name,
        _Info.ERROR,
        _Info.ENUM_TYPE_UNEXPECTED_STRING_VALUES,
        "Unexpected string values",
        f"Examples contain values missing from the schema: {named}{more}.",
    )


def _missing_fraction(
    dataset: statistics_pb2.DatasetFeatureStatistics,
    features: dict[str, statistics_pb2.FeatureNameStatistics],
    name: str,
) -> float:
    feature_stats = features.get(name)
    if feature_stats is None:
        return 1.0
    return 1.0 - common_stats(feature_stats).num_non_missing / dataset.num_examples


def validate_statistics(
    stats: statistics_pb2.DatasetFeatureStatisticsList,
    schema: schema_pb2.Schema,
    baseline_stats: Optional[statistics_pb2.DatasetFeatureStatisticsList] = None,
    max_missing_fraction_jump: float = 0.1,
) -> anomalies_pb2.Anomalies:
    """Checks one split's statistics against ``schema`` (and a baseline split).

    Args:
      stats: statistics with exactly one dataset (the split to check).
      schema: the expected schema.
      baseline_stats: statistics of a reference split (e.g. train when checking eval);
        when given, a feature whose fraction of missing rows differs from the baseline's
        by more than ``max_missing_fraction_jump`` is a WARNING.
      max_missing_fraction_jump: the allowed change of that fraction, in [0, 1].

    Returns:
      The anomalies (empty ``anomaly_info`` when there are none); ``baseline`` holds the
      schema, as TFDV does.

    Raises:
      TypeError: an argument has the wrong proto type.
      ValueError: a statistics argument does not hold exactly one dataset, or
        ``max_missing_fraction_jump`` is outside [0, 1].
    """
    dataset = single_dataset(stats, "stats", "validate_statistics")
    if not isinstance(schema, schema_pb2.Schema):
        raise TypeError(f"validate_statistics takes a Schema, got {type(schema).__name__}.")
    baseline = None
    if baseline_stats is not None:
        baseline = single_dataset(baseline_stats, "baseline_stats", "validate_statistics")
    if not 0.0 <= max_missing_fraction_jump <= 1.0:
        raise ValueError(
            f"max_missing_fraction_jump must be in [0, 1], got {max_missing_fraction_jump!r}."
        )

    anomalies = anomalies_pb2.Anomalies()
    anomalies.baseline.CopyFrom(schema)
    if dataset.num_examples == 0:
        anomalies.data_missing = True
        info = anomalies.dataset_anomaly_info
        info.severity = _Info.ERROR
        info.short_description = "No examples"
        info.description = f"The split {dataset.name!r} has no examples."
        info.reason.add(
            type=_Info.DATASET_LOW_NUM_EXAMPLES,
            short_description=info.short_description,
            description=info.description,
        )
        return anomalies

    reasons = _Reasons()
    features = {feature_name(f): f for f in dataset.features}
    schema_names = {f.name for f in schema.feature}
    for feature in schema.feature:
        if _is_deprecated(feature):
            continue
        name = feature.name
        feature_stats = features.get(name)
        common = None if feature_stats is None else common_stats(feature_stats)
        if not _check_presence(reasons, name, feature, common, dataset.num_examples):
            continue
        if (
            feature.type in _EXPECTED_STATS_TYPES
            and feature_stats.type not in _EXPECTED_STATS_TYPES[feature.type]
        ):
            reasons.add(
                name,
                _Info.ERROR,
                _Info.UNEXPECTED_DATA_TYPE,
                "Unexpected data type",
                f"Expected data of type: {schema_pb2.FeatureType.Name(feature.type)} but got "
                f"{_SCHEMA_TYPE_OF_STATS.get(feature_stats.type, 'UNKNOWN')}.",
            )
            continue
        _check_values(reasons, name, feature, common)
        _check_domain(reasons, name, schema, feature, feature_stats, common)

    for name, feature_stats in features.items():
        if name not in schema_names and common_stats(feature_stats).num_non_missing > 0:
            reasons.add(
                name,
                _Info.ERROR,
                _Info.SCHEMA_NEW_COLUMN,
                "New column",
                "New column (column in data but not in schema).",
            )

    if baseline is not None and baseline.num_examples > 0:
        baseline_features = {feature_name(f): f for f in baseline.features}
        for feature in schema.feature:
            name = feature.name
            if _is_deprecated(feature) or (name not in features and name not in baseline_features):
                continue
            current = _missing_fraction(dataset, features, name)
            before = _missing_fraction(baseline, baseline_features, name)
            if abs(current - before) > max_missing_fraction_jump:
                reasons.add(
                    name,
                    _Info.WARNING,
                    _Info.COMPARATOR_L_INFTY_HIGH,
                    "Missing fraction changed",
                    f"The feature is missing in {current:.1%} of the examples of "
                    f"{dataset.name!r} but in {before:.1%} of the baseline "
                    f"{baseline.name!r}, a change above the threshold "
                    f"{max_missing_fraction_jump:g}.",
                )
    reasons.to_proto(anomalies)
    return anomalies


def merge_anomalies(into: anomalies_pb2.Anomalies, more: anomalies_pb2.Anomalies) -> None:
    """Adds ``more``'s feature anomalies to ``into``'s (a feature in both keeps every
    reason, the worse severity)."""
    for name, info in more.anomaly_info.items():
        if name not in into.anomaly_info:
            into.anomaly_info[name].CopyFrom(info)
            continue
        target = into.anomaly_info[name]
        target.reason.extend(info.reason)
        target.severity = max(target.severity, info.severity)
        target.short_description = "Multiple errors"
        target.description = f"{target.description} {info.description}"
