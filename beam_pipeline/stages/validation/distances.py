"""Drift and skew: one split's distributions against a baseline split's, with TFDV's
comparators (``drift_comparator`` / ``skew_comparator`` of a schema feature).

Both sides are put on ONE set of bins before they are compared, as TFDV's
``jensen_shannon_divergence`` rebuckets both histograms to common boundaries:

* a string feature: its values (the rank histogram), the rest of its values beyond the
  histogram, and the rows that miss it;
* a numeric feature: the union of both sides' bucket edges of the quantile buckets the
  statistics keep for this (``transforms.statistics.CDF_STAT``; when either side lacks
  them, statistics of TFX or of an earlier version: both sides' standard histograms, so
  that identical data is at distance 0); each edge is a bin of its own (a value holding rows
  exactly, e.g. a year 2007 in every row) and so is each gap between two edges, a bucket's
  rows spread evenly over its width; plus the NaNs and the rows that miss the feature.

So a feature that vanished (missing in every row), appeared (missing from every baseline
row) or moved to another single value is at distance 1, and one outlier moves one quantile
bucket's share, not the whole histogram (an equal-width histogram from min to max put the
data into its first bucket).

Measures (any on any feature type; ``--drift_threshold``/``--skew_threshold`` give a
categorical feature the first, a numeric one the second):

* ``infinity_norm``: the L-infinity distance, the largest change of one bin's share: of
  one value for strings and categorical ints (``int_domain.is_categorical``), of the
  cumulative share below a value for other numbers (the Kolmogorov-Smirnov statistic: a
  bin's share depends on how finely the quantiles cut, the cumulative share does not);
* ``jensen_shannon_divergence``: the Jensen-Shannon divergence (base 2, in [0, 1]) of
  the two sides' shares: of the values for strings; for numbers, of 10 bins of equal
  mass in the two sides' mixture, cut from the common bins (the quantiles of both
  merged), since on 100 quantiles two small samples of one distribution barely meet.

Hand-written, as the rest of validation: tensorflow-data-validation has no release for
this stack (docs/limits.md); the inputs and outputs are TFDV's protos.

Example::

    anomalies = compare_distributions(span2, span1, schema, "drift_comparator", 0.1)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

import numpy as np
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2

from beam_pipeline.stages.common.feature_stats import (
    common_stats,
    feature_name,
    single_dataset,
    string_values,
)

__all__ = ["compare_distributions", "feature_shares"]

_Info = anomalies_pb2.AnomalyInfo
_INACTIVE_STAGES = frozenset(
    {schema_pb2.PLANNED, schema_pb2.ALPHA, schema_pb2.DEPRECATED, schema_pb2.DEBUG_ONLY}
)
# The custom statistic of transforms.statistics (CDF_STAT), spelled here so that this
# module imports no Beam.
_CDF_STAT = "beam_pipeline.quantile_buckets"
# The Jensen-Shannon divergence of numbers compares this many bins of equal mass in the
# two sides' mixture (TFDV's histograms have 10 buckets): finer bins would measure the
# noise of small samples (two halves of 170 penguins differ by 0.5 on 100 quantiles).
_MERGED_BINS = 10


def _quantile_buckets(feature: Optional[statistics_pb2.FeatureNameStatistics]) -> list:
    """The ``_CDF_STAT`` histogram's buckets of a numeric feature (none: TFX's statistics,
    an earlier version's, or a feature without values)."""
    if feature is None or feature.WhichOneof("stats") != "num_stats":
        return []
    for custom in feature.custom_stats:
        if custom.name == _CDF_STAT and custom.histogram.buckets:
            return list(custom.histogram.buckets)
    return []


def _standard_buckets(feature: Optional[statistics_pb2.FeatureNameStatistics]) -> list:
    if feature is None or feature.WhichOneof("stats") != "num_stats":
        return []
    for histogram in feature.num_stats.histograms:
        if histogram.type == statistics_pb2.Histogram.STANDARD and histogram.buckets:
            return list(histogram.buckets)
    return []


def _by_quantiles(*features: Optional[statistics_pb2.FeatureNameStatistics]) -> bool:
    """Whether both sides are compared on their quantile buckets: only when every side with
    a standard histogram (values) also has them. Otherwise both sides use their standard
    histograms: one side's quantile points against the other's equal-width ranges share
    no bin (a year 2007-2009 of identical data was at Jensen-Shannon 1)."""
    return all(bool(_quantile_buckets(f)) or not _standard_buckets(f) for f in features)


def _buckets(
    feature: Optional[statistics_pb2.FeatureNameStatistics], quantiles: bool = True
) -> list[tuple]:
    """(low, high, rows) of a numeric feature's quantile buckets (``quantiles`` and it has
    them), else of its standard histogram; low == high: a point."""
    chosen = _quantile_buckets(feature) if quantiles else []
    if chosen:
        return [(b.low_value, b.high_value, b.sample_count) for b in chosen]
    out = []
    for b in _standard_buckets(feature):
        low, high = b.low_value, b.high_value
        if not math.isfinite(low) or not math.isfinite(high):
            low = high = low if not math.isfinite(low) else high  # an infinity
        out.append((low, high, b.sample_count))
    return out


def _num_nan(feature: Optional[statistics_pb2.FeatureNameStatistics]) -> float:
    if feature is None or feature.WhichOneof("stats") != "num_stats":
        return 0.0
    return float(max((h.num_nan for h in feature.num_stats.histograms), default=0))


def _missing(feature, num_examples: int) -> float:
    """Rows without the feature (every row when the split has no such feature)."""
    if feature is None:
        return float(num_examples)
    common = common_stats(feature)
    return float(common.num_missing or (num_examples - common.num_non_missing))


def _numeric_bins(current: list[tuple], baseline: list[tuple]) -> tuple[np.ndarray, ...]:
    """Both sides' rows per common bin: each edge of either side, then each gap between
    consecutive edges (interleaved in value order)."""
    edges = np.array(sorted({e for b in (*current, *baseline) for e in b[:2]}), dtype=float)
    if edges.size == 0:
        return np.zeros(0), np.zeros(0)
    sides = []
    for buckets in (current, baseline):
        points = np.zeros(edges.size)
        gaps = np.zeros(max(edges.size - 1, 0))
        for low, high, rows in buckets:
            if low == high:
                points[np.searchsorted(edges, low)] += rows
                continue
            # Spread evenly over (low, high]: the share of each gap inside it.
            lo, hi = edges[:-1], edges[1:]
            overlap = np.clip(np.minimum(hi, high) - np.maximum(lo, low), 0.0, None)
            gaps += rows * overlap / (high - low)
        bins = np.zeros(2 * edges.size - 1)
        bins[0::2], bins[1::2] = points, gaps
        sides.append(bins)
    return sides[0], sides[1]


def _merge_bins(p: np.ndarray, q: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The fine bins grouped, in value order, into about ``count`` bins of equal mass in
    the two sides' mixture (a group ends at the fine bin where the mixture's cumulative
    share passes the next k/count)."""
    if p.size == 0:
        return p, q
    mixture = np.cumsum(p / (p.sum() or 1.0) + q / (q.sum() or 1.0)) / 2
    group = np.searchsorted(np.arange(1, count) / count, mixture, side="left")
    # The fine bin where the share passes a threshold closes its group.
    group = np.concatenate([[0], group[:-1]])
    return np.bincount(group, weights=p), np.bincount(group, weights=q)


def feature_shares(
    current: Optional[statistics_pb2.FeatureNameStatistics],
    current_rows: int,
    baseline: Optional[statistics_pb2.FeatureNameStatistics],
    baseline_rows: int,
    merged_bins: Optional[int] = None,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Both sides' shares of the common bins (see the module's docstring), and whether the
    bins are ordered values (numeric) rather than categories. A side absent from its
    statistics (None) is a feature missing in every one of its ``*_rows`` rows. With
    ``merged_bins``, a numeric feature's fine bins are grouped into that many bins of equal
    mass in the two sides' mixture (the quantiles of both merged)."""
    numeric = any(
        f is not None and f.WhichOneof("stats") == "num_stats" for f in (current, baseline)
    )
    if numeric:
        quantiles = _by_quantiles(current, baseline)
        p, q = _numeric_bins(_buckets(current, quantiles), _buckets(baseline, quantiles))
        if merged_bins:
            p, q = _merge_bins(p, q, merged_bins)
        head_p = [_missing(current, current_rows), _num_nan(current)]
        head_q = [_missing(baseline, baseline_rows), _num_nan(baseline)]
    else:
        values_p, values_q = ({} if f is None else string_values(f) for f in (current, baseline))
        labels = sorted(set(values_p) | set(values_q))
        p = np.array([values_p.get(v, 0.0) for v in labels], dtype=float)
        q = np.array([values_q.get(v, 0.0) for v in labels], dtype=float)
        # Values beyond the rank histogram (more distinct values than it holds).
        head_p = [_missing(current, current_rows), _rest(current, p.sum())]
        head_q = [_missing(baseline, baseline_rows), _rest(baseline, q.sum())]
    p = np.concatenate([head_p, p])
    q = np.concatenate([head_q, q])
    sp, sq = p.sum(), q.sum()
    p = p / sp if sp > 0 else p
    q = q / sq if sq > 0 else q
    return p, q, numeric


def _rest(feature, listed: float) -> float:
    if feature is None:
        return 0.0
    return max(float(common_stats(feature).tot_num_values) - listed, 0.0)


def jensen_shannon(p: Sequence[float], q: Sequence[float]) -> float:
    """The Jensen-Shannon divergence, base 2 (0: the same shares, 1: disjoint)."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if p.sum() <= 0 or q.sum() <= 0:
        return 0.0 if p.sum() == q.sum() else 1.0
    m = (p + q) / 2

    def kl(a):
        keep = a > 0
        return float(np.sum(a[keep] * np.log2(a[keep] / m[keep])))

    return float(min(1.0, max(0.0, 0.5 * kl(p) + 0.5 * kl(q))))


def l_infinity(p: Sequence[float], q: Sequence[float], cumulative: bool) -> float:
    """The largest change of one bin's share (of the share up to a bin, ``cumulative``)."""
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if p.size == 0:
        return 0.0
    if cumulative:
        p, q = np.cumsum(p), np.cumsum(q)
    return float(np.max(np.abs(p - q)))


def _is_deprecated(feature: schema_pb2.Feature) -> bool:
    return feature.deprecated or feature.lifecycle_stage in _INACTIVE_STAGES


def _measure(
    feature: schema_pb2.Feature, comparator: str, numeric: bool, default: Optional[float]
) -> Optional[tuple[str, float]]:
    """(measure, threshold) of ``feature`` for ``comparator``: the schema's, else the
    default's (L-infinity for categorical features, Jensen-Shannon for numeric ones)."""
    if feature.HasField(comparator):
        configured = getattr(feature, comparator)
        if configured.HasField("jensen_shannon_divergence"):
            return "jensen_shannon_divergence", configured.jensen_shannon_divergence.threshold
        if configured.HasField("infinity_norm"):
            return "infinity_norm", configured.infinity_norm.threshold
    if default is None:
        return None
    categorical = not numeric or (
        feature.HasField("int_domain") and feature.int_domain.is_categorical
    )
    return ("infinity_norm" if categorical else "jensen_shannon_divergence"), default


def compare_distributions(
    stats: statistics_pb2.DatasetFeatureStatisticsList,
    baseline_stats: statistics_pb2.DatasetFeatureStatisticsList,
    schema: schema_pb2.Schema,
    comparator: str,
    default_threshold: Optional[float] = None,
) -> anomalies_pb2.Anomalies:
    """Drift or skew, as TFDV's ``drift_comparator`` / ``skew_comparator``: each feature
    with a threshold is compared with the baseline split; beyond it is an ERROR that names
    the distance and the threshold. A feature with values here and none in the baseline
    that no threshold covers is a WARNING (a new feature is always mentioned).

    Args:
      stats: statistics of the split to check (one dataset).
      baseline_stats: statistics of the baseline (the previous run's split for drift,
        train for skew), one dataset.
      schema: its features' ``<comparator>`` thresholds are used.
      comparator: ``drift_comparator`` or ``skew_comparator``.
      default_threshold: the threshold of every feature the schema gives none (None: only
        the schema's).

    Returns:
      The anomalies.
    """
    dataset = single_dataset(stats, "stats", "compare_distributions")
    baseline = single_dataset(baseline_stats, "baseline_stats", "compare_distributions")
    current = {feature_name(f): f for f in dataset.features}
    before = {feature_name(f): f for f in baseline.features}
    what = "drift from the previous run" if comparator == "drift_comparator" else "train/eval skew"
    anomalies = anomalies_pb2.Anomalies()
    for feature in schema.feature:
        name = feature.name
        now, then = current.get(name), before.get(name)
        if _is_deprecated(feature) or (now is None and then is None):
            continue
        if feature.type == schema_pb2.STRUCT or any(
            f is not None and f.WhichOneof("stats") == "struct_stats" for f in (now, then)
        ):
            # A STRUCT has no values of its own; its children are features of their own.
            if feature.HasField(comparator):
                _add(
                    anomalies,
                    name,
                    _Info.WARNING,
                    _Info.UNKNOWN_TYPE,
                    "Comparator not applied",
                    f"The schema's {comparator} cannot compare the STRUCT feature {name!r}, "
                    "which has no values of its own; set it on the struct's child features.",
                )
            continue
        p, q, numeric = feature_shares(now, dataset.num_examples, then, baseline.num_examples)
        chosen = _measure(feature, comparator, numeric, default_threshold)
        if chosen is not None and chosen[0] == "jensen_shannon_divergence" and numeric:
            p, q, _ = feature_shares(
                now, dataset.num_examples, then, baseline.num_examples, _MERGED_BINS
            )
        if chosen is None:
            appeared = (then is None or common_stats(then).num_non_missing == 0) and (
                now is not None and common_stats(now).num_non_missing > 0
            )
            if appeared and comparator == "drift_comparator":
                _add(
                    anomalies,
                    name,
                    _Info.WARNING,
                    _Info.SCHEMA_NEW_COLUMN,
                    "New feature since the baseline",
                    f"The feature has values in {dataset.name!r} but none in the baseline "
                    f"{baseline.name!r}; no {comparator} threshold compares it.",
                )
            continue
        kind, threshold = chosen
        if kind == "infinity_norm":
            categorical = not numeric or (
                feature.HasField("int_domain") and feature.int_domain.is_categorical
            )
            distance = l_infinity(p, q, cumulative=not categorical)
            reason, measure = _Info.COMPARATOR_L_INFTY_HIGH, "L-infinity distance"
        else:
            distance = jensen_shannon(p, q)
            reason = _Info.COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH
            measure = "approximate Jensen-Shannon divergence"
        if distance > threshold:
            _add(
                anomalies,
                name,
                _Info.ERROR,
                reason,
                f"High {measure} ({what})",
                f"The {measure} between {dataset.name!r} and the baseline {baseline.name!r} "
                f"is {distance:.4g}, above the threshold {threshold:g} ({what}).",
            )
    return anomalies


def _add(anomalies, name: str, severity: int, reason: int, short: str, long: str) -> None:
    info = anomalies.anomaly_info[name]
    if not info.path.step:
        info.path.step.append(name)
        info.short_description, info.description = short, long
    else:
        info.short_description = "Multiple errors"
        info.description = f"{info.description} {long}"
    info.severity = max(info.severity, severity)
    info.reason.add(type=reason, short_description=short, description=long)
