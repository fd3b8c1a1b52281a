"""Histograms of a numeric feature, estimated from its tfx-bsl ``QuantilesSketch``
(:mod:`transforms.statistics` keeps one per feature): TFDV's QUANTILES and STANDARD
histograms, and the quantile buckets drift and skew compare (``CDF_STAT``).

Example::

    histogram = quantiles_histogram(sketch, num_buckets=10, total=num_values)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from tensorflow_metadata.proto.v0 import statistics_pb2
from tfx_bsl import sketches

__all__ = ["CDF_STAT", "equi_width_histogram", "quantile_buckets", "quantiles_histogram"]

_Histogram = statistics_pb2.Histogram
# Number of fine quantiles the equal-width histogram is interpolated from.
_FINE_QUANTILES = 1000
# The custom statistic (a histogram) that drift and skew compare: the values' distribution
# at ``_CDF_QUANTILES`` quantiles, a bucket per quantile where the data is, so that one
# outlier costs one bucket's resolution (the equal-width histogram spans min to max: one
# outlier squeezed the data into its first bucket). A zero-width bucket is a value that
# holds its rows exactly (a point mass); the others are (low, high].
CDF_STAT = "beam_pipeline.quantile_buckets"
_CDF_QUANTILES = 100


def quantiles_histogram(
    sketch: sketches.QuantilesSketch, num_buckets: int, total: float
) -> statistics_pb2.Histogram:
    """Equal-mass buckets between consecutive quantiles (TFDV's QUANTILES histogram)."""
    histogram = statistics_pb2.Histogram(type=_Histogram.QUANTILES)
    bounds = sketch.GetQuantiles(num_buckets).flatten().to_numpy()
    for low, high in zip(bounds[:-1], bounds[1:], strict=True):
        histogram.buckets.add(
            low_value=float(low), high_value=float(high), sample_count=total / num_buckets
        )
    return histogram


def quantile_buckets(sketch: sketches.QuantilesSketch) -> statistics_pb2.Histogram:
    """The ``CDF_STAT`` histogram: between consecutive distinct quantiles the rows the
    sketch counts there (its cumulative weights), a point repeated among the quantiles
    (and the minimum, and an infinity) as a zero-width bucket holding its rows."""
    histogram = statistics_pb2.Histogram(type=_Histogram.QUANTILES)
    points, cumulative = sketch.GetQuantilesAndCumulativeWeights(_CDF_QUANTILES)
    points = points.flatten().to_numpy()
    cumulative = cumulative.flatten().to_numpy()
    distinct, first, repeats = np.unique(points, return_index=True, return_counts=True)
    at_point = cumulative[first + repeats - 1]
    below = 0.0
    for i, (point, count, repeat) in enumerate(zip(distinct, at_point, repeats, strict=True)):
        point = float(point)
        atom = i == 0 or repeat > 1 or not math.isfinite(point)
        low = point if atom or not math.isfinite(distinct[i - 1]) else float(distinct[i - 1])
        histogram.buckets.add(low_value=low, high_value=point, sample_count=float(count - below))
        below = float(count)
    return histogram


def equi_width_histogram(feature: Any, num_buckets: int, total: int) -> statistics_pb2.Histogram:
    """Equal-width buckets over the finite range of ``feature`` (its accumulator in
    :mod:`transforms.statistics`: finite min/max/count, infinity counts and the values'
    sketch), estimated from the quantiles sketch.

    The sketch gives, at ``_FINE_QUANTILES + 1`` points, the number of values <= each
    point. Between two consecutive distinct points the values are taken as spread evenly,
    except where a point repeats among the quantiles: that value carries the whole gap's
    mass (a point mass, e.g. the 0s and 1s of a label). Each bucket is [low, high) as in
    numpy, the last one closed; -inf/+inf values land in the first/last bucket, whose
    edge then reads -inf/+inf.
    """
    histogram = statistics_pb2.Histogram(type=_Histogram.STANDARD)
    low, high = feature.finite_min, feature.finite_max
    if feature.finite_count == 0 or low == high:
        bucket_low = (
            -math.inf if feature.num_neg_inf else (low if feature.finite_count else feature.min)
        )
        bucket_high = (
            math.inf if feature.num_pos_inf else (high if feature.finite_count else feature.max)
        )
        histogram.buckets.add(low_value=bucket_low, high_value=bucket_high, sample_count=total)
        return histogram
    points, cumulative = feature.values_sketch.GetQuantilesAndCumulativeWeights(_FINE_QUANTILES)
    points = points.flatten().to_numpy()
    cumulative = cumulative.flatten().to_numpy()
    distinct, first, repeats = np.unique(points, return_index=True, return_counts=True)
    # Cumulative weight at the last occurrence of each distinct point.
    at_point = cumulative[first + repeats - 1]
    mass = np.diff(at_point, prepend=0.0)
    previous = np.concatenate([[distinct[0]], distinct[:-1]])
    edges = np.linspace(low, high, num_buckets + 1)
    inner = edges[1:-1, None]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        span = distinct - previous  # inf - inf is nan: such a gap is an atom below
        atom = (repeats > 1) | ~np.isfinite(previous) | ~np.isfinite(distinct) | ~(span > 0)
        atom[0] = True
        fraction = np.where(
            atom,
            (distinct < inner).astype(np.float64),
            np.clip((inner - previous) / np.where(atom, 1.0, span), 0.0, 1.0),
        )
    below = fraction @ mass  # values < each inner edge
    cumulative_at_edges = np.concatenate([[0.0], below, [float(total)]])
    counts = np.maximum(np.diff(cumulative_at_edges), 0.0)
    for i, count in enumerate(counts):
        bucket_low = -math.inf if (i == 0 and feature.num_neg_inf) else float(edges[i])
        bucket_high = (
            math.inf if (i == num_buckets - 1 and feature.num_pos_inf) else float(edges[i + 1])
        )
        histogram.buckets.add(
            low_value=bucket_low, high_value=bucket_high, sample_count=float(count)
        )
    return histogram
