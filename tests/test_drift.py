"""Drift and skew with TFDV's semantics (beam_pipeline.stages.validation.distances): the
statistics computed by the product's own statistics code on in-memory Arrow batches,
compared by the product's comparators. Two random halves of one large dataset never alarm;
each kind of shift a user hit is caught naming the feature and the distance; one outlier
does not alarm. (The CLI's Validation stop is in test_continuous_training.py.)"""

from __future__ import annotations

import json
import math
import os
import re
from html import unescape

import numpy as np
import pyarrow as pa
import pytest
from conftest import statistics_in_process
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2
from test_cli_runs import _render_in_chromium, needs_chromium

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
    carat = rng.lognormal(-0.4, 0.3, ROWS)
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


def _without_quantile_buckets(stats):
    """As statistics of TFX, or of an earlier version: no quantile buckets (the
    comparators fall back on the standard histogram)."""
    out = type(stats)()
    out.CopyFrom(stats)
    for feature in out.datasets[0].features:
        del feature.custom_stats[:]
    return out


def test_two_random_halves_of_one_large_dataset_never_alarm(halves):
    first, second = halves
    second = _stats(second)
    for threshold in (0.1, 0.02):
        anomalies = compare_distributions(second, first, _schema(), "drift_comparator", threshold)
        assert _findings(anomalies) == {}, threshold
    old = _without_quantile_buckets(first)
    anomalies = compare_distributions(second, old, _schema(), "drift_comparator", 0.1)
    assert _findings(anomalies) == {}


def test_a_baseline_without_quantile_buckets_is_compared_on_histograms(data):
    """A baseline written by an earlier version (no quantile buckets) against this run's
    statistics of the same data: both sides on their standard histograms, no alarm (a
    year 2007-2009 was at Jensen-Shannon 1: its points here, ranges there). A real shift
    still alarms."""
    rows = {k: v[:12_000] for k, v in data.items()}
    rows["year"] = 2007 + np.random.default_rng(5).integers(0, 3, 12_000)
    schema = _schema(year=("jensen_shannon_divergence", 0.1), price=("infinity_norm", 0.01))
    now = _stats(rows)
    old = _without_quantile_buckets(now)
    for current, baseline in ((now, old), (old, now)):
        anomalies = compare_distributions(current, baseline, schema, "drift_comparator", 0.1)
        assert _findings(anomalies) == {}
    shifted = _stats({**rows, "year": rows["year"] + 1, "carat": rows["carat"] * 1.6})
    found = _findings(compare_distributions(shifted, old, schema, "drift_comparator", 0.1))
    assert set(found) == {"year", "carat"}, found
    assert all(severity == _Info.ERROR for severity, _ in found.values()), found


def test_a_comparator_on_a_struct_feature_is_refused_in_one_sentence():
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import statistics_pb2

    stats = text_format.Parse(
        'datasets { name: "train" num_examples: 3 features { path { step: "s" } type: STRUCT '
        "struct_stats { common_stats { num_non_missing: 3 } } } }",
        statistics_pb2.DatasetFeatureStatisticsList(),
    )
    schema = schema_pb2.Schema()
    schema.feature.add(
        name="s", type=schema_pb2.STRUCT
    ).drift_comparator.infinity_norm.threshold = 0.1
    found = _findings(compare_distributions(stats, stats, schema, "drift_comparator"))
    assert found == {
        "s": (
            _Info.WARNING,
            "The schema's drift_comparator cannot compare the STRUCT feature 's', which has no "
            "values of its own; set it on the struct's child features.",
        )
    }


def test_two_random_halves_of_a_small_dataset_do_not_alarm(data):
    # 150 rows a side (penguin-sized): on 100 quantiles the two samples' values barely
    # meet; the 10 bins of equal mass in both sides' mixture do not measure that noise.
    rows = {k: v[:300] for k, v in data.items()}
    first, second = ({k: v[half::2] for k, v in rows.items()} for half in (0, 1))
    anomalies = compare_distributions(
        _stats(second), _stats(first), _schema(), "drift_comparator", 0.1
    )
    assert _findings(anomalies) == {}


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
        {"carat": (_Info.ERROR, "approximate Jensen-Shannon divergence", 0.2, 0.6)},
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


# --- through the CLI: two tiny spans, data stages only --------------------------------


def _cli(*argv: str) -> tuple[int, str, str]:
    """A run through the CLI's entry point in this process: (exit code, stdout, stderr)."""
    import contextlib
    import io

    from beam_pipeline import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([*argv, "--no_progress"])
    return code, out.getvalue(), err.getvalue()


def _write_span(folder, year: int) -> None:
    """240 rows: a year (the same in every row), a depth z on a coarse grid with one
    outlier (31.8), a float x with inf and -inf, an island and a label. The spans differ
    only in the year."""
    import csv

    rng = np.random.default_rng(5)
    folder.mkdir(parents=True)
    with open(folder / "data.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["year", "z", "x", "island", "label"])
        for i in range(240):
            z = 31.8 if i == 17 else float(np.clip(np.round(rng.normal(3.5, 0.8) * 2) / 2, 0, 6))
            x = ["inf", "-inf", "0.5", "1.5", "2.5", "2.5"][i % 6]
            island = ["Biscoe", "Dream", "Biscoe", "Torgersen"][int(rng.integers(0, 4))]
            writer.writerow([year, z, x, island, i % 2])


@pytest.fixture(scope="module")
def span_runs(tmp_path_factory):
    """Span 1 alone (year 2007), then span 2 (year 2009) as the latest span, both with
    --drift_threshold 0.1: (root, the two runs' (exit code, stdout, stderr))."""
    tmp = tmp_path_factory.mktemp("spans")
    root = str(tmp / "root")
    pattern = str(tmp / "data" / "span-{SPAN}" / "*.csv")
    common = [f"--data={pattern}", f"--pipeline_root={root}", "--label=label"]
    common += ["--drift_threshold=0.1", "--no_trainer", "--no_tuner"]
    _write_span(tmp / "data" / "span-1", 2007)
    first = _cli(*common, "--run_id=s1")
    _write_span(tmp / "data" / "span-2", 2009)
    second = _cli(*common, "--run_id=s2")
    return root, first, second


def test_a_float_column_with_infinities_ends_with_its_report(span_runs):
    root, (code, out, err), _ = span_runs
    assert code == 0, err[-3000:]
    assert "Traceback" not in err + out
    assert f"Report: {os.path.join(root, 'runs', 's1', 'report.html')}" in out
    html = open(os.path.join(root, "runs", "s1", "report.html"), encoding="utf-8").read()
    # x's histogram reaches past the axis to -inf and inf.
    x_plot = html.split('id="feature-x"', 1)[1].split("</table>", 1)[0]
    assert 'data-low="-inf"' in x_plot and 'data-high="inf"' in x_plot


def test_a_single_value_that_moved_stops_the_span_at_validation(span_runs):
    root, _, (code, _, err) = span_runs
    assert code == 3, err[-3000:]
    found = re.findall(
        r"train (\w+): The approximate Jensen-Shannon divergence between 'train' and the "
        r"baseline 'train' is ([0-9.]+), above the threshold 0\.1",
        err,
    )
    assert [(name, float(d)) for name, d in found] == [("year", 1.0)], err[-3000:]
    # The report shows the baseline span beside this one: year's rows give each its min.
    with open(os.path.join(root, "runs", "s2", "report.html"), encoding="utf-8") as f:
        year = f.read().split('id="feature-year"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(
        r"<tr><td>([a-z ]+)</td>\s*<td[^>]*>\d+</td><td[^>]*>[0-9.]+</td>\s*"
        r'<td class="n">(\d+)</td>',
        year,
    )
    assert rows == [("train", "2009"), ("eval", "2009"), ("baseline train", "2007")], year


# Added to a copy of the report: each histogram bar's drawn box, as Chromium laid it out,
# in its SVG's coordinates, with its feature, split and bucket edges.
_BAR_PROBE = """<script>
const bars = [];
for (const svg of document.querySelectorAll("svg.bp-hist")) {
  let h = svg.closest("table");
  while (h && h.tagName !== "H3") h = h.previousElementSibling;
  const box = svg.getBoundingClientRect();
  for (const r of svg.querySelectorAll("rect.bp-bucket")) {
    const b = r.getBoundingClientRect();
    bars.push({feature: h.id.slice("feature-".length), split: r.dataset.split,
      low: r.dataset.low, high: r.dataset.high, left: b.left - box.left,
      right: b.right - box.left, x0: +svg.dataset.x0, x1: +svg.dataset.x1,
      px0: +svg.dataset.px0, px1: +svg.dataset.px1});
  }
}
document.body.setAttribute("data-bars", JSON.stringify(bars));
</script>"""


def _proto_buckets(path: str) -> dict[str, set]:
    """feature -> the (low, high) of its STANDARD histogram's buckets in a statistics file."""
    from beam_pipeline.engine.artifacts import Statistics

    out = {}
    for feature in Statistics.read_file(path).datasets[0].features:
        for histogram in feature.num_stats.histograms:
            if histogram.type == histogram.STANDARD:
                out[feature.path.step[0]] = {(b.low_value, b.high_value) for b in histogram.buckets}
    return out


@needs_chromium
def test_the_reports_histograms_draw_each_bucket_at_its_own_edges(span_runs, tmp_path):
    """Rendered in headless Chromium: every bar of every histogram (train, eval and the
    drift baseline's train) spans its bucket's edges on the plot's one value axis, and the
    edges drawn are the ones in the statistics protos."""
    root, _, _ = span_runs
    run = os.path.join(root, "runs", "s2")
    with open(os.path.join(run, "report.html"), encoding="utf-8") as f:
        page = f.read()
    probe = tmp_path / "bars.html"
    probe.write_text(page.replace("</body>", _BAR_PROBE + "</body>"), encoding="utf-8")
    screenshot = tmp_path / "bars.png"
    dom, console = _render_in_chromium(str(probe), tmp_path, str(screenshot))
    assert console == [] and screenshot.stat().st_size > 20_000
    (found,) = re.findall(r'<body data-bars="([^"]*)"', dom)
    bars = json.loads(unescape(found))

    want = {}
    for split, folder in (("train", run), ("eval", run), ("baseline train", "s1")):
        path = os.path.join(root, "runs", folder, "statistics", split.split()[-1])
        for feature, buckets in _proto_buckets(os.path.join(path, "FeatureStats.pb")).items():
            want[(feature, split)] = buckets
    drawn = {}
    for bar in bars:
        low, high = float(bar["low"]), float(bar["high"])
        drawn.setdefault((bar["feature"], bar["split"]), set()).add((low, high))

        def px(v, bar=bar):
            """Where the plot's value axis puts the value ``v`` (finite)."""
            scale = (bar["px1"] - bar["px0"]) / (bar["x1"] - bar["x0"])
            return bar["px0"] + scale * (v - bar["x0"])

        if low == high:  # one value: a thin bar centred on it
            assert abs((bar["left"] + bar["right"]) / 2 - px(low)) < 0.6, bar
            continue
        if low == -math.inf:  # reaches a stub left of the axis
            assert bar["left"] < bar["px0"] - 1, bar
        else:
            assert abs(bar["left"] - px(low)) < 0.6, bar
        if high == math.inf:
            assert bar["right"] > bar["px1"] + 1, bar
        else:
            assert abs(bar["right"] - px(high)) < 0.6, bar
    assert drawn == want
    # Both splits and the baseline are drawn for every numeric feature; x reaches +-inf.
    assert {split for _, split in drawn} == {"train", "eval", "baseline train"}
    assert any(lo == -math.inf for lo, _ in drawn[("x", "train")])
    assert any(hi == math.inf for _, hi in drawn[("x", "train")])


def test_a_baseline_whose_statistics_are_gone_stops_validation_in_one_sentence(tmp_path):
    """The store records span 1's run as complete, but its statistics folder was moved
    away: span 2 (drifted) is not taken for the first run of the pipeline (which passed
    and became the next baseline); Validation stops naming the folder and the fix."""
    import shutil

    root = str(tmp_path / "root")
    pattern = str(tmp_path / "data" / "span-{SPAN}" / "*.csv")
    common = [f"--data={pattern}", f"--pipeline_root={root}", "--label=label"]
    common += ["--drift_threshold=0.1", "--no_trainer", "--no_tuner"]
    _write_span(tmp_path / "data" / "span-1", 2007)
    code, _, err = _cli(*common, "--run_id=s1")
    assert code == 0, err[-3000:]
    statistics = os.path.join(root, "runs", "s1", "statistics")
    assert os.path.isdir(statistics)
    shutil.move(statistics, str(tmp_path / "moved"))
    _write_span(tmp_path / "data" / "span-2", 2009)
    code, out, err = _cli(*common, "--run_id=s2")
    assert code == 2, err[-3000:]
    assert "Traceback" not in err + out
    assert "first complete run" not in err + out
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line == (
        f"error: Validation cannot check drift: the statistics of run s1, this pipeline's "
        f"previous complete run, are gone from disk ({statistics}); put that folder back, "
        "or pass --ignore_anomalies to go on without the drift check, or leave out "
        "--drift_threshold."
    ), err[-3000:]
    # --ignore_anomalies goes on without the drift check, and says so.
    code, out, err = _cli(*common, "--run_id=s3", "--ignore_anomalies")
    assert code == 0, err[-3000:]
    assert (
        "drift: not checked (the previous complete run s1's statistics are gone from disk: "
        f"{statistics})"
    ) in out + err, out + err
    # Span 1's statistics back, run s3's gone (it reused the statistics run s2 computed of
    # span 2): drift is checked against span 1's, and the note names the newer run skipped.
    shutil.move(str(tmp_path / "moved"), statistics)
    gone = os.path.join(root, "runs", "s2", "statistics")
    shutil.move(gone, str(tmp_path / "moved2"))
    code, out, err = _cli(*common, "--run_id=s4")
    assert code == 3, err[-3000:]
    with open(os.path.join(root, "runs", "s4", "anomalies", "summary.txt"), encoding="utf-8") as f:
        summary = f.read()
    assert (
        f"drift checked against {statistics} (the newer complete run s3's statistics are gone "
        f"from disk: {gone})"
    ) in summary, summary
