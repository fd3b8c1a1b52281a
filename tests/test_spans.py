"""Span inputs through the CLI: per-span cached ExampleGen + Statistics, per-span analyzer
cache in Transform, and the span patterns (``{SPAN}``, ``{VERSION}``, dates).

- A run after a new span arrives reads only that span; its statistics equal those of a
  run reading every span of the window anew (a new pipeline root: byte for byte) and of
  a plain ``--data`` glob over the same files (field for field); Transform analyzes only
  the new span, the others' analyzers read from tf.Transform's cache.
- A damaged or half-written span unit is removed and the span read again, never reused;
  a killed run's private folder is deleted by the next run.
- ``{VERSION}`` reads a span's latest version, ``{YYYY}{MM}{DD}`` makes a day a span; bad
  patterns are one-sentence errors.
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


def _cli(*argv: str) -> int:
    """The CLI's entry point in this process: what these tests read is the run's summary
    and its errors, not the terminal (a fresh interpreter per run would import TensorFlow
    and Beam again each time)."""
    from beam_pipeline import cli

    return cli.main([*argv, "--no_progress"])


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
    code = _cli(
        f"--data={data}", f"--pipeline_root={root}", f"--run_id={run_id}",
        "--csv_null_values=,NA", "--no_trainer", "--no_tuner", *flags,
    )  # fmt: skip
    assert code == 0
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

    from beam_pipeline.engine.artifacts import Statistics

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
    shown = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", "runs", "show", "b", f"--pipeline_root={root}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "Data: spans 2-3 (span 2 reused from earlier runs, not read)" in shown.stdout

    # A preprocessing_fn changed outside its analyzers: Transform runs again, every span's
    # analyzers from the cache.
    with open(MODULE) as f:
        code = f.read()
    changed = tmp_path / "module.py"
    changed.write_text(
        code.replace(
            "    return outputs\n",
            '    outputs["island_copy"] = outputs["island_xf"]\n    return outputs\n',
            1,
        )
    )
    third = _run(root, "e", pattern, "--span_window=2", f"--module_file={changed}")
    assert third["ExampleGen"]["status"] == "cached"
    assert third["Transform"]["status"] == "ok"
    assert third["Transform"]["details"]["analyzer_cache_spans_reused"] == [2, 3]
    assert third["Transform"]["details"]["analyzer_cache_spans_analyzed"] == []

    # The same window read anew (a new pipeline root), and as a plain glob of its files.
    fresh = str(tmp_path / "fresh")
    again = _run(fresh, "c", pattern, *window)
    assert again["ExampleGen"]["details"]["spans_read"] == [2, 3]
    # (Without a module file: only statistics are compared, and Transform does not run.)
    flat = str(tmp_path / "flat")
    _run(flat, "d", str(spans / "span-[23]" / "*.csv"))
    for split in ("train", "eval"):
        cached = os.path.join(root, "runs", "b", "statistics", split, "FeatureStats.pb")
        with (
            open(cached, "rb") as f,
            open(cached.replace(root, fresh).replace("/b/", "/c/"), "rb") as g,
        ):
            assert f.read() == g.read(), split
        plain = Statistics.read_file(cached.replace(root, flat).replace("/b/", "/d/"))
        _close(
            json_format.MessageToDict(Statistics.read_file(cached)),
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

    # A run killed while writing span 4's unit left its private folder (its process gone).
    import socket

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    left = os.path.join(
        root, "cache", "spans", f".partial-{socket.gethostname()}-{dead.stdout.strip()}-0a1b2c3d"
    )
    os.makedirs(os.path.join(left, "k", "examples"))

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
    assert not os.path.exists(left)
    assert not glob.glob(os.path.join(root, "cache", "spans", ".partial-*"))


def _csv(path, rows: int = 3) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("a,b\n" + "".join(f"{i},x{i}\n" for i in range(rows)))


def test_version_and_date_specs_pick_the_latest_version_of_each_days_span(tmp_path, capsys):
    """TFX's ``{VERSION}`` (a span's latest version is read) and ``{YYYY}{MM}{DD}`` (the
    span is the days since 1970-01-01), through the CLI: two days, the first with two
    versions, the second with one (the gap of a day without data is an error)."""
    import datetime

    data = tmp_path / "data"
    _csv(data / "2024-02-28" / "v1" / "rows.csv", rows=5)
    _csv(data / "2024-02-28" / "v2" / "rows.csv", rows=7)
    _csv(data / "2024-02-29" / "v1" / "rows.csv", rows=11)
    pattern = str(data / "{YYYY}-{MM}-{DD}" / "v{VERSION}" / "*.csv")
    root = str(tmp_path / "root")
    code = _cli(
        f"--data={pattern}", f"--pipeline_root={root}", "--run_id=r", "--span_window=2",
        "--no_trainer", "--no_tuner",
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err[-3000:]
    example_gen = _summary(root, "r")["ExampleGen"]
    day = (datetime.date(2024, 2, 28) - datetime.date(1970, 1, 1)).days
    assert example_gen["details"]["spans"] == [day, day + 1]
    assert example_gen["details"]["versions"] == {str(day): 2, str(day + 1): 1}
    assert example_gen["rows_in"] == {"all": 7 + 11}  # version 1 of the 28th not read
    assert f"latest versions: span {day} v2, span {day + 1} v1" in example_gen["note"]

    _csv(data / "2024-03-02" / "v1" / "rows.csv")
    capsys.readouterr()
    assert _cli(f"--data={pattern}", f"--pipeline_root={root}", "--span_window=2") != 0
    # 2024 is a leap year: 2024-03-02 is day + 3, and 2024-03-01 (day + 2) is missing.
    err = capsys.readouterr().err
    assert f"has no span {day + 2} (spans found: {day}, {day + 1}, {day + 3})" in err


@pytest.mark.parametrize(
    "pattern, files, message",
    [
        ("d/{YYYY}{MM}/*.csv", [], r"has \{YYYY\}\{MM\} but not \{DD\}; a date span needs"),
        ("d/{SPAN}-{YYYY}{MM}{DD}/*.csv", [], r"has both \{SPAN\} and a date"),
        ("d/v{VERSION}/*.csv", [], r"has \{VERSION\} but no \{SPAN\} or"),
        (
            "d/{YYYY}{MM}{DD}/*.csv",
            ["d/20240230/a.csv"],
            r"d/20240230/a.csv reads the date 2024-02-30, which is not a date; rename",
        ),
        (
            "d/{SPAN}/v{VERSION}/*.csv",
            ["d/1/v2/a.csv", "d/1/v02/a.csv"],
            r"has two matches for version 2 of span 1 \(02 and 2\); keep one spelling",
        ),
        (
            "d/s{SPAN}/v{VERSION}/p{VERSION}.csv",
            ["d/s1/v1/p2.csv"],
            r"reads versions 1 and 2 in its \{VERSION\} places; one path must name one",
        ),
        (
            "d/{YYYY}{MM}{DD}/*.csv",
            ["d/x/a.csv"],
            r"matches no span: no file has digits where \{YYYY\}\{MM\}\{DD\} is; check",
        ),
    ],
)
def test_bad_span_patterns_are_one_sentence(tmp_path, pattern, files, message):
    from beam_pipeline.core.errors import PipelineError
    from transforms.example_gen.input_files import resolve_spans

    for name in files:
        _csv(tmp_path / name)
    with pytest.raises(PipelineError, match=message) as raised:
        resolve_spans(str(tmp_path / pattern))
    text = str(raised.value)
    assert text.count(". ") == 0 and text.endswith("."), text


def _three_spans(folder) -> str:
    """Spans 1, 2 and 3 of two distinct rows each under ``folder``; their --data pattern."""
    for span in (1, 2, 3):
        (folder / f"span-{span}").mkdir(parents=True)
        (folder / f"span-{span}" / "d.csv").write_text(f"a,b\n{span},1\n{span},2\n")
    return str(folder / "span-{SPAN}" / "*.csv")


def test_a_span_folder_deleted_mid_run_is_one_sentence(tmp_path, capsys, monkeypatch):
    import shutil

    from beam_pipeline.stages.example_gen import executor

    data = _three_spans(tmp_path / "d")
    listed = executor.prepare

    def prepare_then_delete(config):
        prepared = listed(config)  # the spans are listed: now span 2 goes
        shutil.rmtree(tmp_path / "d" / "span-2")
        return prepared

    monkeypatch.setattr(executor, "prepare", prepare_then_delete)
    root = tmp_path / "root"
    capsys.readouterr()
    code = _cli(f"--data={data}", f"--pipeline_root={root}", "--run_id=r", "--span_window=3")
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    span_2 = tmp_path / "d" / "span-2" / "d.csv"
    assert err == (
        f"error: Input file {span_2} was deleted or moved while the run read it (it was there "
        "when the run listed its input); keep the input files in place during a run, then rerun."
    )
    assert _summary(str(root), "r")["ExampleGen"]["status"] == "failed"
    # Nothing half-written: no span unit, no examples.
    assert not os.listdir(root / "cache" / "spans")
    assert not (root / "runs" / "r" / "examples").exists()


def test_a_window_analyzed_without_the_analyzer_cache_transforms_as_with_it(tmp_path):
    # Without the cache the window's spans are analyzed together, by one read of every
    # span's files; with it, span by span and merged. Either way the analyzers see every
    # row of the window, so the transformed examples are the same.
    from conftest import read_examples

    spans = tmp_path / "spans"
    _write_span(spans, 1)
    _write_span(spans, 2)
    pattern = str(spans / "span-{SPAN}" / "*.csv")
    transformed = {}
    for name, flags in (("cached", ()), ("uncached", ("--no_analyzer_cache",))):
        root = str(tmp_path / name)
        summary = _run(root, "a", pattern, "--span_window=2", f"--module_file={MODULE}", *flags)
        assert (
            summary["Transform"]["rows_out"]["train"] == summary["ExampleGen"]["rows_out"]["train"]
        )
        examples = read_examples(
            os.path.join(root, "runs", "a", "transformed_examples", "train", "*.gz")
        )
        transformed[name] = [_as_dict(e) for e in examples]
    _close(transformed["cached"], transformed["uncached"])


def _as_dict(example) -> dict:
    from google.protobuf import json_format

    return json_format.MessageToDict(example)


def test_a_preprocessing_fn_without_analyzers_is_not_said_to_write_the_analyzer_cache(tmp_path):
    # tf.Transform caches nothing for it: the note says so, with spans and without,
    # where it said "spans 1-2 analyzed and written to ..." over an empty cache folder.
    module = tmp_path / "no_analyzers.py"
    module.write_text(
        "import tensorflow as tf\n\n\n"
        "def preprocessing_fn(inputs):\n"
        '    return {"mass_x2": tf.cast(inputs["body_mass_g"], tf.float32) * 2}\n'
    )
    spans = tmp_path / "spans"
    _write_span(spans, 1)
    _write_span(spans, 2)
    inputs = {
        "spans": (str(spans / "span-{SPAN}" / "*.csv"), "--span_window=2"),
        "plain": (str(spans / "span-1" / "*.csv"), "--span_window=1"),
    }
    for name, (data, window) in inputs.items():
        root = tmp_path / name
        flags = [f"--module_file={module}"] + ([window] if name == "spans" else [])
        transform = _run(str(root), "a", data, *flags)["Transform"]
        assert transform["status"] == "ok", name
        assert transform["details"]["analyzer_cache"] == (
            "unused: the preprocessing_fn has no analyzers"
        ), name
        assert "analyzer cache unused: the preprocessing_fn has no analyzers" in transform["note"]
        assert not os.listdir(root / "cache" / "transform"), name
        if name == "spans":
            assert transform["details"]["analyzer_cache_spans_analyzed"] == []
            assert transform["details"]["analyzer_cache_spans_reused"] == []
        # Another module's analyzers cached in the same root: the entries are there and
        # the job leaves them as they were, which is not a reuse by this module.
        assert _run(str(root), "b", data, f"--module_file={MODULE}", *flags[1:])
        transform = _run(str(root), "c", data, *flags, "--no_cache=Transform")["Transform"]
        assert transform["status"] == "ok", name
        assert transform["details"]["analyzer_cache"] == (
            "unused: the preprocessing_fn has no analyzers"
        ), name
