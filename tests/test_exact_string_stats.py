"""String statistics are exact at any cardinality: unique counts and top values equal a
plain Python count over the same examples (issue 32: a column of unique ids got a unique
count above its row count and top values counted 4 times for values seen once)."""

from __future__ import annotations

import collections
import contextlib
import glob
import io
import json
import os
import random

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing.util import assert_that
from conftest import REPO, fn_api_pipeline, read_examples

from beam_pipeline.engine.artifacts import Statistics
from transforms import statistics as st

PLANS = ("basic", "pro", "team")
TESTS_DIR = os.path.join(REPO, "tests")


def _ranked(counts: collections.Counter) -> list[tuple[str, int]]:
    """Most frequent first, equal counts in byte order (what the statistics promise)."""
    return sorted(counts.items(), key=lambda vc: (-vc[1], vc[0].encode()))


def _string_features(path: str) -> tuple[int, dict]:
    dataset = Statistics.read_file(path).datasets[0]
    return dataset.num_examples, {f.path.step[0]: f.string_stats for f in dataset.features}


@pytest.mark.slow
def test_unique_ids_and_a_plan_column_through_the_cli(tmp_path, monkeypatch):
    from beam_pipeline import cli

    rng = random.Random(32)
    csv = tmp_path / "customers.csv"
    with open(csv, "w") as f:
        f.write("customer_id,plan,amount\n")
        for i in range(6000):
            f.write(f"c{i:05d},{rng.choice(PLANS)},{rng.random() * 100:.2f}\n")
    root = tmp_path / "root"
    # Two worker processes: the per-value counts of one split meet across processes. The
    # CLI's entry point runs in this process (what it prints is captured as a terminal's
    # would be): a fresh interpreter would import TensorFlow and Beam again; the workers
    # are processes of their own either way.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(
            [
                f"--data={csv}",
                f"--pipeline_root={root}",
                "--runner=DirectRunner",
                "--direct_running_mode=multi_processing",
                "--direct_num_workers=2",
                "--no_progress",
            ]
        )
    assert code == 0
    (run_dir,) = glob.glob(str(root / "runs" / "*"))
    rows = 0
    for split in ("train", "eval"):
        examples = read_examples(os.path.join(run_dir, "examples", split, "*.tfrecord.gz"))
        ids = collections.Counter(
            e.features.feature["customer_id"].bytes_list.value[0].decode() for e in examples
        )
        plans = collections.Counter(
            e.features.feature["plan"].bytes_list.value[0].decode() for e in examples
        )
        num_examples, features = _string_features(
            os.path.join(run_dir, "statistics", split, "FeatureStats.pb")
        )
        assert num_examples == len(examples) > 1000
        rows += num_examples

        customer_id = features["customer_id"]
        assert customer_id.common_stats.num_non_missing == len(examples)
        # Every id once: as many distinct ids as rows, each with frequency 1.
        assert customer_id.unique == len(ids) == len(examples)
        assert set(ids.values()) == {1}
        ranked = _ranked(ids)
        assert [(t.value, t.frequency) for t in customer_id.top_values] == ranked[:20]
        assert [(b.label, b.sample_count) for b in customer_id.rank_histogram.buckets] == (
            ranked[:1000]
        )

        plan = features["plan"]
        assert plan.unique == len(plans) == 3
        assert [(t.value, t.frequency) for t in plan.top_values] == _ranked(plans)
        assert [(b.label, b.sample_count) for b in plan.rank_histogram.buckets] == _ranked(plans)
    assert rows == 6000
    # The summary lists the splits as declared, one full stop each (not ".;").
    with open(os.path.join(run_dir, "summary.json")) as f:
        stages = {s["stage"]: s for s in json.load(f)["stages"]}
    note = "Split 'train': no anomalies; Split 'eval': no anomalies"
    assert stages["Validation"]["note"] == note
    assert f"Validation: {note}\n" in out.getvalue()


def _expected(rows: list[list[bytes]]) -> tuple[int, list[tuple[str, int]]]:
    """(distinct count, the 1000 top (value, count) pairs) by a plain Python count."""
    counts = collections.Counter(v.decode() for row in rows for v in row)
    return len(counts), _ranked(counts)[:1000]


class _ExactMatcher:
    """assert_that matcher (it runs in a worker process): each string feature's unique
    count, top values and rank histogram equal the expected Python count."""

    def __init__(self, expected: dict[str, tuple[int, list[tuple[str, int]]]]):
        self._expected = expected

    def __call__(self, actual):
        (stats,) = actual
        features = {f.path.step[0]: f.string_stats for f in stats.datasets[0].features}
        for name, (unique, ranked) in self._expected.items():
            string_stats = features[name]
            assert string_stats.unique == unique, (name, string_stats.unique, unique)
            assert [(t.value, t.frequency) for t in string_stats.top_values] == ranked[:20]
            buckets = string_stats.rank_histogram.buckets
            assert [(b.label, b.sample_count) for b in buckets] == ranked, name


_ROWS_200K = 200_000
_BATCH_ROWS = 10_000


def _batch_200k(start: int) -> tuple[list[list[bytes]], list[list[bytes]]]:
    """Rows [start, start + _BATCH_ROWS) as (ids, codes): every id once (in an order
    shuffled over the whole range); codes Zipf-like, so that a code's count is summed
    over batches and workers and the top ones have large distinct counts; 0 to 2 codes
    a row. A function of ``start`` alone: workers make the batches themselves (a Create
    of the data would pickle and compress it into the pipeline)."""
    order = np.random.default_rng(32).permutation(_ROWS_200K)[start : start + _BATCH_ROWS]
    draws = np.minimum(np.random.default_rng(start).zipf(1.3, size=_BATCH_ROWS), 150_000)
    ids = [[f"id{i:06d}".encode()] for i in order]
    codes = [
        [f"k{d}".encode(), f"k{d + 1}".encode()][: (0, 1, 1, 2)[i % 4]] for i, d in enumerate(draws)
    ]
    return ids, codes


def _record_batch_200k(start: int) -> pa.RecordBatch:
    ids, codes = _batch_200k(start)
    # Ids as Arrow binary, codes as Arrow strings: both are string features.
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids, pa.list_(pa.binary())),
            pa.array([[v.decode() for v in row] for row in codes], pa.list_(pa.string())),
        ],
        names=["id", "code"],
    )


@pytest.mark.slow
def test_200k_distinct_values_on_beam_equal_a_python_count(monkeypatch):
    starts = list(range(0, _ROWS_200K, _BATCH_ROWS))
    ids, codes = [], []
    for start in starts:
        batch_ids, batch_codes = _batch_200k(start)
        ids += batch_ids
        codes += batch_codes
    expected = {"id": _expected(ids), "code": _expected(codes)}
    assert expected["id"][0] == _ROWS_200K and expected["code"][0] > 10_000
    assert expected["code"][1][0][1] > 1000  # the most frequent code, summed over batches
    # Workers are separate processes: they import this module (for the batches and the
    # matcher) and transforms/ from PYTHONPATH.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([TESTS_DIR, REPO, os.environ.get("PYTHONPATH", "")])
    )
    with fn_api_pipeline("--direct_running_mode=multi_processing", "--direct_num_workers=2") as p:
        stats = (
            p
            | beam.Create(starts)
            | "MakeBatches" >> beam.Map(_record_batch_200k)
            | "Stats" >> st.GenerateStatistics("train")
        )
        assert_that(stats, _ExactMatcher(expected))
