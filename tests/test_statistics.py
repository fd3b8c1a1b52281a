"""GenerateStatistics on real Beam and real Arrow data, checked against numpy.

Every expected number is computed here from the same rows with numpy / plain Python, not
with the module's code path. Counts and moments must match exactly (to float rounding);
sketch-based values (quantiles, standard histogram) within the sketch's error bound; string
value counts (distinct count, top values) exactly, at any cardinality.
"""

from __future__ import annotations

import collections
import os
import pickle

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that, equal_to
from conftest import REPO, fn_api_pipeline, statistics_in_process
from google.protobuf import text_format
from tensorflow_metadata.proto.v0 import statistics_pb2

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import Split
from beam_pipeline.engine.artifacts import Statistics
from transforms import statistics as st
from transforms import statistics_files as sf
from transforms import top_values as tv

STATS = statistics_pb2.FeatureNameStatistics
HIST = statistics_pb2.Histogram
EPS = st._QUANTILES_EPS
TESTS_DIR = os.path.join(REPO, "tests")
GOLDEN_SMALL = os.path.join(REPO, "tests", "testdata", "stats_small.pbtxt")


def _combine(batches, **options) -> statistics_pb2.DatasetFeatureStatisticsList:
    """GenerateStatistics' steps applied in-process, one accumulator for all batches."""
    return statistics_in_process(batches, **options)


def _top_values(batches, num_top=1000, pieces=1):
    """Feature -> (distinct count, top pairs) from the module's per-value steps, the value
    counts split over ``pieces`` top-values accumulators that go through pickle (as a
    shuffle sends them) and are merged."""
    counts = collections.Counter()
    for batch in batches:
        for key, count in tv.string_value_counts(batch):
            counts[key] += count
    fn = tv.TopValuesCombineFn(num_top)
    per_feature = collections.defaultdict(list)
    for i, (key, count) in enumerate(sorted(counts.items())):
        feature, pair = tv.by_feature(key, count)
        accumulators = per_feature[feature]
        if len(accumulators) <= i % pieces:
            accumulators.append(fn.create_accumulator())
        fn.add_input(accumulators[i % pieces], pair)
    return {
        feature: fn.extract_output(
            fn.merge_accumulators(pickle.loads(pickle.dumps(a)) for a in accumulators)
        )
        for feature, accumulators in per_feature.items()
    }


def _features(stats) -> dict[str, statistics_pb2.FeatureNameStatistics]:
    return {".".join(f.path.step): f for f in stats.datasets[0].features}


def _common(feature):
    return getattr(feature, feature.WhichOneof("stats")).common_stats


def _histogram(num_stats, kind):
    (hist,) = [h for h in num_stats.histograms if h.type == kind]
    return hist


# ------------------------------------------------------------------------------- data

# A "column" here is the full list of rows of one feature over the dataset, None where the
# feature is missing (null list or column absent from that batch).


def _mixed_dataset(seed: int, large: bool):
    """Two batches with different column sets, nulls, empty lists and odd values.

    Returns (batches, {feature: rows over both batches}).
    """
    rng = np.random.default_rng(seed)
    n1, n2 = 300, 200
    list_type = pa.large_list if large else pa.list_
    bytes_type = pa.large_binary() if large else pa.binary()

    def maybe(values_fn, n, missing=0.2, empty=0.05, max_len=3):
        rows = []
        for _ in range(n):
            r = rng.random()
            if r < missing:
                rows.append(None)
            elif r < missing + empty:
                rows.append([])
            else:
                rows.append(values_fn(int(rng.integers(1, max_len + 1))))
        return rows

    ints1 = maybe(lambda k: rng.integers(-5, 6, k).tolist(), n1)
    ints2 = maybe(lambda k: rng.integers(-5, 6, k).tolist(), n2)
    words = ["apple", "kiwi", "fig", "banana", "naïve"]
    text1 = maybe(lambda k: [words[i].encode() for i in rng.integers(0, 5, k)], n1)
    text2 = maybe(lambda k: [words[i].encode() for i in rng.integers(0, 5, k)], n2)
    text2[3] = [b"\xff\xfe", b"apple"]  # not UTF-8
    special = [0.0, np.nan, np.inf, -np.inf]
    floats2 = maybe(
        lambda k: [
            float(special[i]) if rng.random() < 0.1 else float(rng.normal(2.0, 3.0))
            for i in rng.integers(0, 4, k)
        ],
        n2,
        max_len=2,
    )
    only1 = [[int(v)] for v in rng.integers(0, 3, n1)]  # single-valued, never null
    batch1 = pa.RecordBatch.from_arrays(
        [
            pa.array(ints1, list_type(pa.int64())),
            pa.array(text1, list_type(bytes_type)),
            pa.array(only1, list_type(pa.int64())),
        ],
        names=["ints", "text", "only_first"],
    )
    batch2 = pa.RecordBatch.from_arrays(
        [
            pa.array(floats2, list_type(pa.float32())),
            pa.array(text2, list_type(bytes_type)),
            pa.array(ints2, list_type(pa.int64())),
        ],
        names=["floats", "text", "ints"],
    )
    columns = {
        "ints": ints1 + ints2,
        "text": text1 + text2,
        "only_first": only1 + [None] * n2,
        # float32 values as Arrow stores them.
        "floats": [None] * n1
        + [None if r is None else np.float32(r).astype(np.float64).tolist() for r in floats2],
    }
    return [batch1, batch2], columns


def _expected_common(rows):
    present = [r for r in rows if r is not None]
    lengths = [len(r) for r in present]
    return {
        "num_non_missing": len(present),
        "num_missing": len(rows) - len(present),
        "min_num_values": min(lengths) if lengths else 0,
        "max_num_values": max(lengths) if lengths else 0,
        "tot_num_values": sum(lengths),
        "avg_num_values": (sum(lengths) / len(present)) if present else 0.0,
    }


# The CommonStatistics fields that are exact counts (avg_num_values is a float).
_COUNTS = ("num_non_missing", "num_missing", "min_num_values", "max_num_values", "tot_num_values")


def _check_common(feature, rows):
    common = _common(feature)
    want = _expected_common(rows)
    for field in _COUNTS:
        assert getattr(common, field) == want[field], field
    assert common.avg_num_values == pytest.approx(want["avg_num_values"], rel=1e-6)
    if want["num_non_missing"]:
        hist = common.num_values_histogram
        assert hist.type == HIST.QUANTILES
        assert sum(b.sample_count for b in hist.buckets) == pytest.approx(want["num_non_missing"])
        assert hist.buckets[0].low_value == want["min_num_values"]
        assert hist.buckets[-1].high_value == want["max_num_values"]


def _rank_error(sorted_values, value, fraction):
    """How far (as a fraction of n) ``value`` is from being the ``fraction`` quantile."""
    n = len(sorted_values)
    lo = np.searchsorted(sorted_values, value, side="left") / n
    hi = np.searchsorted(sorted_values, value, side="right") / n
    return 0.0 if lo <= fraction <= hi else min(abs(lo - fraction), abs(hi - fraction))


def _check_numeric(feature, rows, num_quantiles=10, num_buckets=10, hist_tolerance=None):
    values = np.array([v for r in rows if r is not None for v in r], dtype=np.float64)
    nan = np.isnan(values)
    values = values[~nan]
    finite = values[np.isfinite(values)]
    num = feature.num_stats
    assert num.num_zeros == int(np.count_nonzero(values == 0))
    assert num.min == values.min() and num.max == values.max()
    assert num.mean == pytest.approx(finite.mean(), rel=1e-9, abs=1e-12)
    with np.errstate(over="ignore"):  # values near the float limits: std_dev is inf
        assert num.std_dev == pytest.approx(finite.std(), rel=1e-9, abs=1e-12)
    ordered = np.sort(values)
    assert _rank_error(ordered, num.median, 0.5) <= 2 * EPS
    quantiles = _histogram(num, HIST.QUANTILES)
    standard = _histogram(num, HIST.STANDARD)
    assert quantiles.num_nan == standard.num_nan == int(np.count_nonzero(nan))
    assert len(quantiles.buckets) == num_quantiles
    for i, bucket in enumerate(quantiles.buckets):
        assert bucket.sample_count == pytest.approx(len(values) / num_quantiles)
        assert _rank_error(ordered, bucket.low_value, i / num_quantiles) <= 2 * EPS
    assert quantiles.buckets[-1].high_value == values.max()
    got = np.array([b.sample_count for b in standard.buckets])
    assert got.sum() == pytest.approx(len(values))
    if finite.min() == finite.max():  # one value: one bucket (numpy would widen the range)
        assert [(b.low_value, b.high_value) for b in standard.buckets] == [(num.min, num.max)]
        return
    # Standard histogram: numpy's over the finite range, infinities in the end buckets.
    want, edges = np.histogram(finite, bins=num_buckets, range=(finite.min(), finite.max()))
    want = want.astype(np.float64)
    want[0] += np.count_nonzero(np.isneginf(values))
    want[-1] += np.count_nonzero(np.isposinf(values))
    tolerance = hist_tolerance if hist_tolerance is not None else 2 * EPS * len(values) + 1
    np.testing.assert_allclose(got, want, atol=tolerance)
    np.testing.assert_allclose([b.low_value for b in standard.buckets[1:]], edges[1:-1])
    assert standard.buckets[0].low_value == (-np.inf if np.isneginf(values).any() else finite.min())
    assert standard.buckets[-1].high_value == (
        np.inf if np.isposinf(values).any() else finite.max()
    )


def _check_strings(feature, rows, num_top_values=20):
    values = [v for r in rows if r is not None for v in r]
    string_stats = feature.string_stats
    assert string_stats.unique == len(set(values))
    assert string_stats.avg_length == pytest.approx(
        sum(len(v) for v in values) / len(values), rel=1e-6
    )

    def label(v):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return "__BYTES_VALUE__"

    assert string_stats.invalid_utf8_count == sum(label(v) == "__BYTES_VALUE__" for v in values)
    counts = collections.Counter(label(v) for v in values)
    # Most frequent first, ties in byte order.
    ranked = sorted(counts.items(), key=lambda vc: (-vc[1], vc[0].encode()))
    assert [(t.value, t.frequency) for t in string_stats.top_values] == ranked[:num_top_values]
    assert [(b.label, b.sample_count) for b in string_stats.rank_histogram.buckets] == ranked
    assert [b.low_rank for b in string_stats.rank_histogram.buckets] == list(range(len(ranked)))


def _check_dataset(stats, columns, name="train"):
    assert len(stats.datasets) == 1
    dataset = stats.datasets[0]
    assert dataset.name == name
    num_examples = len(next(iter(columns.values())))
    assert dataset.num_examples == num_examples
    features = _features(stats)
    assert sorted(features) == sorted(columns)
    assert [".".join(f.path.step) for f in dataset.features] == sorted(columns)
    for feature_name, rows in columns.items():
        feature = features[feature_name]
        _check_common(feature, rows)
        if feature.type == STATS.STRING:
            _check_strings(feature, rows)
        else:
            _check_numeric(feature, rows)


# ------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("large", [False, True], ids=["list_binary", "large_list_large_binary"])
def test_two_batches_with_different_columns_and_nulls(large):
    batches, columns = _mixed_dataset(seed=1, large=large)
    with fn_api_pipeline() as p:
        stats = p | beam.Create(batches) | "Stats" >> st.GenerateStatistics("train")

        def check(actual):
            assert len(actual) == 1
            _check_dataset(actual[0], columns)

        assert_that(stats, check)


def test_feature_types_follow_tfdv():
    batches, _ = _mixed_dataset(seed=2, large=False)
    features = _features(_combine(batches))
    assert {name: STATS.Type.Name(f.type) for name, f in features.items()} == {
        "ints": "INT",
        "floats": "FLOAT",
        "text": "STRING",
        "only_first": "INT",
    }
    assert {name: f.WhichOneof("stats") for name, f in features.items()} == {
        "ints": "num_stats",
        "floats": "num_stats",
        "text": "string_stats",
        "only_first": "num_stats",
    }


@pytest.mark.parametrize(
    "arrow_type, rows",
    [
        (pa.list_(pa.int64()), [[1], [2, 3], None, [], [0]]),
        (pa.large_list(pa.int64()), [[1], [2, 3], None, [], [0]]),
        (pa.list_(pa.int32()), [[7], None, [-1, 0]]),
        (pa.list_(pa.float32()), [[1.5], [float("nan")], None, [-0.0, 2.25]]),
        (pa.large_list(pa.float64()), [[1e300], [-1e300], [float("inf")], None]),
        (pa.list_(pa.binary()), [[b"a"], [b"bb", b"a"], None, []]),
        (pa.large_list(pa.large_binary()), [[b"a"], [b"bb", b"a"], None, []]),
        (pa.list_(pa.string()), [["é"], ["x", "é"], None]),
        (pa.large_list(pa.large_string()), [["é"], ["x", "é"], None]),
    ],
    ids=lambda x: str(x) if isinstance(x, pa.DataType) else None,
)
def test_each_arrow_type(arrow_type, rows):
    batch = pa.RecordBatch.from_arrays([pa.array(rows, arrow_type)], names=["f"])
    (feature,) = _combine([batch]).datasets[0].features
    as_bytes = [
        None if r is None else [v.encode() if isinstance(v, str) else v for v in r] for r in rows
    ]
    _check_common(feature, as_bytes)
    value_type = arrow_type.value_type
    if pa.types.is_integer(value_type):
        assert feature.type == STATS.INT
        _check_numeric(feature, rows)
    elif pa.types.is_floating(value_type):
        assert feature.type == STATS.FLOAT
        _check_numeric(
            feature,
            [
                None
                if r is None
                else np.array(r, value_type.to_pandas_dtype()).astype(np.float64).tolist()
                for r in rows
            ],
        )
    else:
        assert feature.type == STATS.STRING
        _check_strings(feature, as_bytes)


def _numeric_batches(values: np.ndarray, batch_size: int):
    """Single-valued rows, vectorised (no per-row Python)."""
    out = []
    for start in range(0, len(values), batch_size):
        chunk = values[start : start + batch_size]
        offsets = pa.array(np.arange(len(chunk) + 1, dtype=np.int32))
        out.append(
            pa.RecordBatch.from_arrays(
                [pa.ListArray.from_arrays(offsets, pa.array(chunk, pa.float64()))], names=["x"]
            )
        )
    return out


@pytest.mark.parametrize(
    "name, make_values, hist_tolerance",
    [
        # Continuous: the equal-width histogram is interpolated within the sketch's error.
        ("normal", lambda rng: rng.normal(10.0, 4.0, 100_000), None),
        ("lognormal", lambda rng: rng.lognormal(0.0, 1.0, 100_000), None),
        # Point masses (labels, small ints): the histogram is exact.
        ("binary_label", lambda rng: rng.integers(0, 2, 100_000).astype(np.float64), 1e-6),
        ("small_ints", lambda rng: rng.integers(0, 11, 100_000).astype(np.float64), 1e-6),
        ("constant", lambda rng: np.full(1000, 3.5), 1e-6),
    ],
)
def test_numeric_accuracy_against_numpy(name, make_values, hist_tolerance):
    values = make_values(np.random.default_rng(7))
    (feature,) = _combine(_numeric_batches(values, 7_000)).datasets[0].features
    _check_numeric(feature, [[v] for v in values.tolist()], hist_tolerance=hist_tolerance)


def test_accumulators_of_several_batches_merge_to_one_big_batch():
    batches, columns = _mixed_dataset(seed=3, large=False)
    x_values = np.random.default_rng(3).normal(size=50_000)
    more = _numeric_batches(x_values, 5_000)
    fn = st.StatisticsCombineFn("train", 10, 10)

    # One accumulator per batch, compacted and sent through pickle as a shuffle does,
    # merged in two levels; the string values' counts in 3 merged accumulators.
    accumulators = []
    for batch in batches + more:
        acc = fn.add_input(fn.create_accumulator(), batch)
        accumulators.append(pickle.loads(pickle.dumps(fn.compact(acc))))
    merged = fn.extract_output(
        fn.merge_accumulators(
            [fn.merge_accumulators(accumulators[:5]), fn.merge_accumulators(accumulators[5:])]
        )
    )
    merged = tv.add_top_values(merged, _top_values(batches + more, pieces=3), 20, 1000)

    # The same rows as one RecordBatch (absent columns become null lists).
    table = pa.concat_tables(
        [pa.Table.from_batches([b]) for b in batches + more], promote_options="default"
    )
    (one_batch,) = table.combine_chunks().to_batches()
    assert one_batch.num_rows == 500 + 50_000
    whole = _combine([one_batch])

    merged_features, whole_features = _features(merged), _features(whole)
    assert merged.datasets[0].num_examples == whole.datasets[0].num_examples == 50_500
    assert sorted(merged_features) == sorted(whole_features) == sorted([*columns, "x"])
    for name in whole_features:
        a, b = merged_features[name], whole_features[name]
        assert a.type == b.type
        assert _common(a).num_values_histogram == _common(b).num_values_histogram
        for field in (*_COUNTS, "avg_num_values"):
            assert getattr(_common(a), field) == getattr(_common(b), field), (name, field)
        if a.type == STATS.STRING:
            assert a.string_stats == b.string_stats
        else:
            for field in ("min", "max", "num_zeros"):
                assert getattr(a.num_stats, field) == getattr(b.num_stats, field), (name, field)
            assert a.num_stats.mean == pytest.approx(b.num_stats.mean, rel=1e-12, abs=1e-15)
            assert a.num_stats.std_dev == pytest.approx(b.num_stats.std_dev, rel=1e-12)
    # And both agree with numpy.
    expected = {k: rows + [None] * 50_000 for k, rows in columns.items()}
    expected["x"] = [None] * 500 + [[v] for v in x_values.tolist()]
    _check_dataset(merged, expected)
    _check_dataset(whole, expected)


def test_accumulator_pickles_and_keeps_its_state():
    batches, columns = _mixed_dataset(seed=4, large=True)
    fn = st.StatisticsCombineFn("train", 10, 10)
    acc = fn.create_accumulator()
    for batch in batches:
        fn.add_input(acc, batch)
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        restored = pickle.loads(pickle.dumps(acc, protocol=protocol))
        assert tv.add_top_values(
            fn.extract_output(restored), _top_values(batches), 20, 1000
        ) == _combine(batches)
    # A restored accumulator still accepts input and merges.
    restored = pickle.loads(pickle.dumps(acc))
    fn.add_input(restored, batches[0])
    doubled = {k: v + v[:300] for k, v in columns.items()}
    top = _top_values([*batches, batches[0]])
    _check_dataset(tv.add_top_values(fn.extract_output(restored), top, 20, 1000), doubled)


def test_empty_input_gives_one_dataset_with_no_examples():
    expected = statistics_pb2.DatasetFeatureStatisticsList()
    expected.datasets.add(name="eval", num_examples=0)
    with fn_api_pipeline() as p:
        stats = (
            p
            | beam.Create([], reshuffle=False).with_output_types(pa.RecordBatch)
            | st.GenerateStatistics("eval")
        )
        assert_that(stats, equal_to([expected]))


def test_batches_with_no_rows_and_all_null_columns():
    batches = [
        pa.RecordBatch.from_arrays([pa.array([], pa.list_(pa.int64()))], names=["a"]),
        pa.RecordBatch.from_arrays(
            [
                pa.array([None, None], pa.list_(pa.int64())),
                pa.array([None, None], pa.list_(pa.null())),
            ],
            names=["a", "nothing"],
        ),
    ]
    features = _features(_combine(batches))
    assert features["a"].type == STATS.INT
    assert _common(features["a"]).num_missing == 2
    assert _common(features["a"]).num_non_missing == 0
    assert _common(features["nothing"]).num_missing == 2
    assert len(_histogram(features["a"].num_stats, HIST.STANDARD).buckets) == 0


def test_multi_processing_direct_runner(monkeypatch):
    # Workers are separate processes: they import this module (for the matcher) and
    # transforms/ from PYTHONPATH.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([TESTS_DIR, REPO, os.environ.get("PYTHONPATH", "")])
    )
    batches, columns = _mixed_dataset(seed=5, large=False)
    # Several small batches so that both workers get some.
    pieces = [b.slice(i, 50) for b in batches for i in range(0, b.num_rows, 50)]
    with fn_api_pipeline("--direct_running_mode=multi_processing", "--direct_num_workers=2") as p:
        stats = p | beam.Create(pieces) | "Stats" >> st.GenerateStatistics("train")
        assert_that(stats, _DatasetMatcher(columns))


class _DatasetMatcher:
    """assert_that matcher (a picklable object: it runs inside a worker process)."""

    def __init__(self, columns):
        self._columns = columns

    def __call__(self, actual):
        assert len(actual) == 1
        _check_dataset(actual[0], self._columns)


def test_golden_small_dataset_matches_pbtxt():
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([[1], [2], [2], [40]], pa.list_(pa.int64())),
            pa.array([[0.5, 1.5], None, [], [-1.0]], pa.list_(pa.float32())),
            pa.array([[b"a"], [b"b"], [b"a"], None], pa.list_(pa.binary())),
        ],
        names=["age", "score", "tag"],
    )
    got = _combine(
        [batch], name="small", num_top_values=2, num_quantiles=2, num_histogram_buckets=2
    )
    with open(GOLDEN_SMALL, encoding="utf-8") as f:
        want = text_format.Parse(f.read(), statistics_pb2.DatasetFeatureStatisticsList())
    assert text_format.MessageToString(got) == text_format.MessageToString(want)


def test_distinct_count_and_top_values_are_exact_beyond_the_rank_histogram():
    # Every value once, in 4 batches, the top values in 3 merged accumulators: a sketch
    # (KMV, Misra-Gries) gave an estimate here, above the row count and with counts of 4.
    values = [f"id{i}".encode() for i in range(20_000)]
    offsets = pa.array(np.arange(len(values) + 1, dtype=np.int32))
    column = pa.ListArray.from_arrays(offsets, pa.array(values, pa.binary()))
    batch = pa.RecordBatch.from_arrays([column], names=["id"])
    batches = [batch.slice(i, 5_000) for i in range(0, 20_000, 5_000)]
    (feature,) = _combine(batches).datasets[0].features
    string_stats = feature.string_stats
    assert string_stats.unique == 20_000
    ranked = sorted(v.decode() for v in values)  # all once: byte order
    assert [(b.label, b.sample_count) for b in string_stats.rank_histogram.buckets] == [
        (v, 1) for v in ranked[:1000]
    ]
    assert [(t.value, t.frequency) for t in string_stats.top_values] == [
        (v, 1) for v in ranked[:20]
    ]
    top = _top_values(batches, pieces=3)
    assert top["id"][0] == 20_000
    assert top["id"][1] == [(1, v.encode()) for v in ranked[:1000]]


@pytest.mark.parametrize(
    "batches, message",
    [
        (
            [
                pa.RecordBatch.from_arrays([pa.array([[1]], pa.list_(pa.int64()))], names=["a"]),
                pa.RecordBatch.from_arrays(
                    [pa.array([[1.0]], pa.list_(pa.float32()))], names=["a"]
                ),
            ],
            "Feature 'a' has INT values in some record batches and FLOAT values in others",
        ),
        (
            [pa.RecordBatch.from_arrays([pa.array([1, 2], pa.int64())], names=["flat"])],
            "Feature 'flat' has Arrow type int64; statistics need list",
        ),
        (
            [
                pa.RecordBatch.from_arrays(
                    [pa.array([[{"x": 1}]], pa.list_(pa.struct([("x", pa.int64())])))],
                    names=["nested"],
                )
            ],
            "Feature 'nested' has values of Arrow type struct",
        ),
    ],
    ids=["type_conflict", "not_a_list", "struct_values"],
)
def test_bad_input_is_a_clear_error(batches, message):
    with pytest.raises(PipelineError, match=message):
        _combine(batches)


def test_type_conflict_between_accumulators_is_a_clear_error():
    fn = st.StatisticsCombineFn("train", 10, 10)
    a = fn.add_input(
        fn.create_accumulator(),
        pa.RecordBatch.from_arrays([pa.array([[1]], pa.list_(pa.int64()))], names=["a"]),
    )
    b = fn.add_input(
        fn.create_accumulator(),
        pa.RecordBatch.from_arrays([pa.array([[b"x"]], pa.list_(pa.binary()))], names=["a"]),
    )
    with pytest.raises(PipelineError, match="Feature 'a' has INT values .* STRING values"):
        fn.merge_accumulators([a, b])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dataset_name": ""}, "dataset_name must be a non-empty string"),
        ({"dataset_name": "t", "num_top_values": 0}, "num_top_values must be an integer >= 1"),
        ({"dataset_name": "t", "num_quantiles": 1}, "num_quantiles must be an integer >= 2"),
        (
            {"dataset_name": "t", "num_histogram_buckets": 2.5},
            "num_histogram_buckets must be an integer >= 1",
        ),
        (
            {"dataset_name": "t", "num_rank_histogram_buckets": True},
            "num_rank_histogram_buckets must be an integer >= 1",
        ),
    ],
)
def test_init_checks_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        st.GenerateStatistics(**kwargs)


def test_write_and_read_statistics_round_trip(tmp_path):
    batches, _ = _mixed_dataset(seed=6, large=False)
    stats = _combine(batches)
    path = str(tmp_path / "train" / "FeatureStats.pb")
    sf.write_statistics(stats, path)
    with open(path, "rb") as f:  # the plain binary proto TFDV's load_stats_binary reads
        assert statistics_pb2.DatasetFeatureStatisticsList.FromString(f.read()) == stats
    assert Statistics.read_file(path) == stats
    assert Statistics(str(tmp_path)).read(Split.TRAIN) == stats


def test_read_statistics_errors_name_the_file(tmp_path):
    missing = str(tmp_path / "nope.pb")
    with pytest.raises(PipelineError, match=f"Statistics file {missing} does not exist"):
        Statistics.read_file(missing)
    bad = tmp_path / "bad.pb"
    bad.write_bytes(b"\xff\xff\xff not a proto")
    with pytest.raises(
        PipelineError, match=f"Statistics file {bad} is not a binary DatasetFeatureStatistics"
    ):
        Statistics.read_file(str(bad))
    with pytest.raises(TypeError, match="write_statistics takes a DatasetFeatureStatisticsList"):
        sf.write_statistics("not stats", str(tmp_path / "x.pb"))


def test_counters_count_rows_and_batches():
    batches, _ = _mixed_dataset(seed=8, large=False)
    p = fn_api_pipeline()
    _ = p | beam.Create(batches) | st.GenerateStatistics("train")
    result = p.run()
    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query()["counters"]
        if c.key.metric.namespace == "beam_pipeline"
    }
    assert counters["statistics.rows"] == 500
    assert counters["statistics.batches"] == 2
