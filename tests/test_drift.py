"""Drift and skew with TFDV's semantics (beam_pipeline.stages.validation.distances): the
statistics computed by the product's own statistics code on in-memory Arrow batches,
compared by the product's comparators. Two random halves of one large dataset never alarm;
each kind of shift a user hit is caught naming the feature and the distance; one outlier
does not alarm. (The CLI's Validation stop is in test_continuous_training.py.)"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pytest
from conftest import statistics_in_process
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2

from beam_pipeline.stages.validation.distances import compare_distributions

_Info = anomalies_pb2.AnomalyInfo
ROWS = 120_000
ISLANDS = np.array([b"Biscoe", b"Dream", b"Torgersen"])


def _column(values, kind):
    """A list<kind> column, one value per row; None rows are missing."""
    if values is None:
        return pa.array([None] * ROWS, pa.list_(kind))
    values = pa.array(values, kind)
    offsets = pa.array(np.arange(len(values) + 1, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, values)


def _stats(columns: dict, name: str = "train"):
    n = len(next(v for v in columns.values() if v is not None))
    kinds = {"z": pa.float64(), "carat": pa.float64(), "year": pa.int64(), "price": pa.int64()}
    arrays, names = [], []
    for feature, values in columns.items():
        kind = kinds.get(feature, pa.binary())
        if values is None:
            arrays.append(pa.array([None] * n, pa.list_(kind)))
        else:
            arrays.append(_column(values, kind))
        names.append(feature)
    return statistics_in_process([pa.RecordBatch.from_arrays(arrays, names=names)], name)


@pytest.fixture(scope="module")
def data():
    """One large dataset (diamonds-like: depth z up to 6.43, carat, price, a year and an
    island), in a random order."""
    rng = np.random.default_rng(7)
    z = np.clip(rng.normal(3.5, 0.7, ROWS), 0.0, 6.43)
    carat = rng.lognormal(-0.4, 0.55, ROWS)
    return {
        "z": z,
        "carat": carat,
        "price": np.round(carat * 3900 + rng.normal(0, 300, ROWS)).astype(np.int64) + 400,
        "year": np.full(ROWS, 2007, dtype=np.int64),
        "island": ISLANDS[rng.choice(3, ROWS, p=[0.5, 0.35, 0.15])],
    }


def _schema(**comparators):
    schema = schema_pb2.Schema()
    types = {"z": schema_pb2.FLOAT, "carat": schema_pb2.FLOAT}
    for name in ("z", "carat", "price", "year", "island", "new"):
        feature = schema.feature.add(name=name, type=types.get(name, schema_pb2.INT))
        if name in ("island", "new"):
            feature.type = schema_pb2.BYTES
        if name in comparators:
            kind, threshold = comparators[name]
            getattr(feature.drift_comparator, kind).threshold = threshold
    return schema


@pytest.fixture(scope="module")
def halves(data):
    """Two random halves of the data, and the first's statistics (span 1)."""
    order = np.random.default_rng(11).permutation(ROWS)
    first, second = order[: ROWS // 2], order[ROWS // 2 :]
    first = {k: v[first] for k, v in data.items()}
    return _stats(first), {k: v[second] for k, v in data.items()}


def _findings(anomalies) -> dict[str, tuple[int, str]]:
    return {
        name: (info.severity, " ".join(r.description for r in info.reason))
        for name, info in anomalies.anomaly_info.items()
    }


def test_two_random_halves_of_one_large_dataset_never_alarm(halves):
    first, second = halves
    second = _stats(second)
    for threshold in (0.1, 0.02):
        anomalies = compare_distributions(second, first, _schema(), "drift_comparator", threshold)
        assert _findings(anomalies) == {}, threshold


def _outlier(sample):
    sample = dict(sample)
    sample["z"] = sample["z"].copy()
    sample["z"][0] = 31.8  # one row, where the baseline's largest is 6.43
    return sample


def _scaled(sample):
    return {**sample, "carat": sample["carat"] * 1.6}


def _vanished(sample):
    return {**sample, "island": None}  # empty in every row


def _year_moved(sample):
    return {**sample, "year": np.full(len(sample["year"]), 2009, dtype=np.int64)}


def _price_shifted(sample):
    return {**sample, "price": sample["price"] + 3000}


def _appeared(sample):
    return {**sample, "new": np.array([b"x"] * len(sample["z"]))}


# case | how span 2 differs from span 1 | the schema's comparators | flag threshold |
# expected: {feature: (severity, measure, lowest distance, highest distance)}
CASES = [
    ("one outlier", _outlier, {}, 0.1, {}),
    (
        "carat x 1.6",
        _scaled,
        {},
        0.1,
        {"carat": (_Info.ERROR, "approximate Jensen-Shannon divergence", 0.11, 0.6)},
    ),
    (
        "island empty in every row",
        _vanished,
        {},
        0.1,
        {"island": (_Info.ERROR, "L-infinity distance", 0.99, 1.0)},
    ),
    (
        "year 2007 -> 2009 in every row",
        _year_moved,
        {"year": ("jensen_shannon_divergence", 0.1)},
        None,
        {"year": (_Info.ERROR, "approximate Jensen-Shannon divergence", 0.99, 1.0)},
    ),
    (
        "INT price + 3000, schema infinity_norm 0.01",
        _price_shifted,
        {"price": ("infinity_norm", 0.01)},
        None,
        {"price": (_Info.ERROR, "L-infinity distance", 0.5, 1.0)},
    ),
    (
        "a new column, no threshold: mentioned",
        _appeared,
        {},
        None,
        {"new": (_Info.WARNING, None, None, None)},
    ),
    (
        "a new column under --drift_threshold",
        _appeared,
        {},
        0.1,
        {"new": (_Info.ERROR, "L-infinity distance", 0.99, 1.0)},
    ),
]


@pytest.mark.parametrize(
    "change, comparators, flag, expected",
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_shift_is_caught_naming_the_feature_and_the_distance(
    halves, change, comparators, flag, expected
):
    first, second = halves
    # Span 2: a random 12k-row sample of the other half, changed.
    sample = np.random.default_rng(3).choice(ROWS // 2, 12_000, replace=False)
    span2 = change({k: v[sample] for k, v in second.items()})
    anomalies = compare_distributions(
        _stats(span2), first, _schema(**comparators), "drift_comparator", flag
    )
    found = _findings(anomalies)
    assert set(found) == set(expected), found
    for name, (severity, measure, low, high) in expected.items():
        got_severity, text = found[name]
        assert got_severity == severity, text
        if measure is None:
            assert "has values in 'train' but none in the baseline" in text
            continue
        (distance,) = re.findall(
            rf"The {measure} between 'train' and the baseline 'train' is ([0-9.e-]+), above "
            r"the threshold",
            text,
        )
        assert low <= float(distance) <= high, text
