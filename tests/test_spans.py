"""Span inputs through the CLI: per-span cached ExampleGen + Statistics, per-span analyzer
cache in Transform, and the span patterns (``{SPAN}``, ``{VERSION}``, dates).

- A run after a new span arrives reads only that span; its statistics equal those of a
  run reading every span of the window anew (a new pipeline root: byte for byte) and of
  a plain ``--data`` glob over the same files (field for field); Transform analyzes only
  the new span, the others' analyzers read from tf.Transform's cache.
- A damaged or half-written span unit is removed and the span read again, never reused.
"""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import subprocess
import sys

import pytest

from beam_pipeline.config import BUNDLED_EXAMPLE_DIR

pytestmark = pytest.mark.slow

PENGUINS = os.path.join(BUNDLED_EXAMPLE_DIR, "penguins.csv")
MODULE = os.path.join(BUNDLED_EXAMPLE_DIR, "penguin_module.py")
# Rows of penguins.csv per span (span n: the rows after span n-1's).
SIZES = (60, 70, 80, 50)


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *argv, "--no_progress"],
        capture_output=True,
        text=True,
        timeout=900,
    )


def _summary(root: str, run_id: str) -> dict:
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        return {s["stage"]: s for s in json.load(f)["stages"]}


def _write_span(folder, span: int) -> None:
    # Rows without a missing value: every window then infers the same schema (a feature
    # optional in one window and required in the next has another tf.Transform graph,
    # whose analyzers no cache entry of the other window serves).
    with open(PENGUINS, newline="") as f:
        rows = [r for r in csv.reader(f) if "NA" not in r]
    start = sum(SIZES[: span - 1])
    path = folder / f"span-{span}"
    path.mkdir(parents=True)
    with open(path / "data.csv", "w", newline="") as f:
        csv.writer(f).writerows([rows[0], *rows[1 + start : 1 + start + SIZES[span - 1]]])


def _run(root: str, run_id: str, data: str, *flags: str) -> dict:
    proc = _cli(
        f"--data={data}", f"--pipeline_root={root}", f"--run_id={run_id}",
        "--csv_null_values=,NA", "--no_trainer", "--no_tuner", *flags,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _summary(root, run_id)


def _close(a, b, path="") -> None:
    """Equal protos as dicts, floats to 1e-9 relative (a merge in another order rounds
    the last bits of a mean differently)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for key in a:
            _close(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (path, a, b)
    else:
        assert a == b, (path, a, b)


def test_a_new_span_is_read_alone_and_the_windows_statistics_equal_a_fresh_run(tmp_path):
    from google.protobuf import json_format

    from transforms.statistics import read_statistics

    spans = tmp_path / "spans"
    _write_span(spans, 1)
    _write_span(spans, 2)
    pattern = str(spans / "span-{SPAN}" / "*.csv")
    root = str(tmp_path / "root")
    window = ["--span_window=2", f"--module_file={MODULE}"]

    first = _run(root, "a", pattern, *window)
    assert first["ExampleGen"]["details"]["spans_read"] == [1, 2]
    assert first["ExampleGen"]["details"]["rows_read"] == SIZES[0] + SIZES[1]
    assert first["Transform"]["details"]["analyzer_cache_spans_analyzed"] == [1, 2]

    _write_span(spans, 3)
    second = _run(root, "b", pattern, *window)
    example_gen = second["ExampleGen"]
    assert example_gen["details"]["spans"] == [2, 3]
    assert example_gen["details"]["spans_reused"] == [2]
    assert example_gen["details"]["rows_read"] == SIZES[2]  # span 2 not read again
    assert example_gen["rows_in"] == {"all": SIZES[1] + SIZES[2]}
    assert example_gen["note"].startswith("spans 2-3; span 2 reused from ")
    assert "span 3 read (80 rows)" in example_gen["note"]
    transform = second["Transform"]
    assert transform["details"]["analyzer_cache_spans_reused"] == [2]
    assert transform["details"]["analyzer_cache_spans_analyzed"] == [3]
    assert transform["rows_out"]["train"] == example_gen["rows_out"]["train"]

    # The same window read anew (a new pipeline root), and as a plain glob of its files.
    fresh = str(tmp_path / "fresh")
    again = _run(fresh, "c", pattern, *window)
    assert again["ExampleGen"]["details"]["spans_read"] == [2, 3]
    flat = str(tmp_path / "flat")
    _run(flat, "d", str(spans / "span-[23]" / "*.csv"), f"--module_file={MODULE}")
    for split in ("train", "eval"):
        cached = os.path.join(root, "runs", "b", "statistics", split, "FeatureStats.pb")
        with (
            open(cached, "rb") as f,
            open(cached.replace(root, fresh).replace("/b/", "/c/"), "rb") as g,
        ):
            assert f.read() == g.read(), split
        plain = read_statistics(cached.replace(root, flat).replace("/b/", "/d/"))
        _close(
            json_format.MessageToDict(read_statistics(cached)),
            json_format.MessageToDict(plain),
        )
    # The transform graph from the cached analyzers is the one a fresh analysis writes.
    assets = sorted(
        glob.glob(
            os.path.join(root, "runs", "b", "transform_graph", "**", "*vocab*"), recursive=True
        )
    )
    for path in assets:
        with (
            open(path, "rb") as f,
            open(path.replace(root, fresh).replace("/b/", "/c/"), "rb") as g,
        ):
            assert f.read() == g.read(), path


def test_a_damaged_or_half_written_span_unit_is_read_again_never_reused(tmp_path):
    spans = tmp_path / "spans"
    for span in (1, 2, 3):
        _write_span(spans, span)
    pattern = str(spans / "span-{SPAN}" / "*.csv")
    root = str(tmp_path / "root")
    _run(root, "a", pattern, "--span_window=3")
    units = {}
    for folder in glob.glob(os.path.join(root, "cache", "spans", "*", "span.json")):
        with open(folder) as f:
            units[json.load(f)["span"]] = os.path.dirname(folder)
    assert sorted(units) == [1, 2, 3]
    # Span 2: a statistics state rewritten in place; span 3: its listing gone (as a job
    # stopped while publishing leaves it).
    state = os.path.join(units[2], "statistics", "train", "accumulator.pkl")
    with open(state, "r+b") as f:
        f.seek(10)
        f.write(b"\x00\x01\x02")
    os.remove(os.path.join(units[3], "_COMPLETE"))

    _write_span(spans, 4)
    second = _run(root, "b", pattern, "--span_window=4")
    details = second["ExampleGen"]["details"]
    assert details["spans_reused"] == [1]
    assert details["spans_read"] == [2, 3, 4]
    note = second["ExampleGen"]["note"]
    assert (
        "span 2's cached unit removed (statistics/train/accumulator.pkl's content changed)" in note
    )
    assert "span 3's cached unit removed (it was never completed" in note
    assert second["ExampleGen"]["rows_in"] == {"all": sum(SIZES)}
    assert not glob.glob(os.path.join(root, "cache", "spans", ".partial-*"))
