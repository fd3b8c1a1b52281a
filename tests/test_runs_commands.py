"""The ``runs`` commands on two cheap data-only runs of one pipeline root: what they print
for the inputs a user gets wrong (a negative ``--limit``, a ``COLUMNS`` that is not a number,
the lineage of an artifact deleted since) and the statuses ``runs show`` gives each stage
(the ones the run's summary gave it, skips included)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import pytest

from beam_pipeline import cli
from beam_pipeline.progress import PROGRESS_PREFIX

DATA_ONLY = ["--no_trainer", "--no_tuner"]
# The store's status of an execution that the summary shows as each of these.
STORE_STATUS = {"ok": "complete", "skipped": "skipped", "cached": "cached"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Three runs: ``first`` runs the data stages, ``second`` reuses them, ``third`` reruns
    Transform (``--no_cache=Transform``: its analyzer cache is reused); and the lines each
    printed (its progress lines through a pipe, and its summary)."""
    path = str(tmp_path_factory.mktemp("runs_commands"))
    printed = {}
    for run_id, more in (("first", []), ("second", []), ("third", ["--no_cache=Transform"])):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = cli.main([f"--pipeline_root={path}", f"--run_id={run_id}", *DATA_ONLY, *more])
        assert code == 0, out.getvalue()
        printed[run_id] = out.getvalue().splitlines()
    return path, printed


@pytest.fixture
def root(runs):
    return runs[0]


@pytest.mark.parametrize("run_id", ["first", "second", "third"])
def test_a_skipped_stage_is_shown_once_as_skipped_never_first_as_running(runs, run_id):
    # (A stage switched off, or without the model or the --infer_data it needs, was shown
    # "> Pusher: running", then at once "> Pusher: skipped".)
    root, printed = runs
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        skipped = [s["stage"] for s in json.load(f)["stages"] if s["status"] == "skipped"]
    assert {"Tuner", "Trainer", "Evaluator", "InfraValidator", "Pusher", "BulkInferrer"} <= set(
        skipped
    )
    lines = printed[run_id]
    for stage in skipped:
        assert f"{PROGRESS_PREFIX}{stage}: skipped" in lines, lines
        assert not any(x.startswith(f"{PROGRESS_PREFIX}{stage}: running") for x in lines), lines


def _runs(capsys, root: str, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["runs", *args, f"--pipeline_root={root}"])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "limit,code,listed,said",
    [
        ("-1", 2, None, "error: runs list --limit -1 is not a number of runs; pass a positive"),
        ("0", 2, None, "error: runs list --limit 0 is not a number of runs; pass a positive"),
        ("1", 0, ["third"], ""),
        ("2", 0, ["third", "second"], ""),
        ("3", 0, ["third", "second", "first"], ""),
    ],
    ids=["-1", "0", "1", "2", "3"],
)
def test_runs_list_limit(root, capsys, limit, code, listed, said):
    got, out, err = _runs(capsys, root, "list", f"--limit={limit}", "--json")
    assert got == code, err
    if listed is None:
        assert err.startswith(said) and err.count("\n") == 1, err
        assert out == ""
    else:
        assert [r["run_id"] for r in json.loads(out)] == listed
        assert err == said


@pytest.mark.parametrize("columns", ["wide", "", "-5", "0", "80"])
def test_runs_list_ignores_a_columns_that_is_not_a_width(root, capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    code, out, err = _runs(capsys, root, "list")
    assert code == 0 and err == "", err
    assert "first" in out and "second" in out and "third" in out


@pytest.mark.parametrize("run_id", ["first", "second", "third"])
def test_runs_show_gives_each_stage_the_status_of_the_summary(root, capsys, run_id):
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        summary = {s["stage"]: s["status"] for s in json.load(f)["stages"]}
    code, out, err = _runs(capsys, root, "show", run_id, "--json")
    assert code == 0, err
    shown = {
        e["stage"].split("+", 1)[0]: e["summary_status"] for e in json.loads(out)["executions"]
    }
    assert {"Pusher", "BulkInferrer"} <= set(shown)
    assert shown == {s: STORE_STATUS[status] for s, status in summary.items() if s in shown}
    assert summary["Pusher"] == summary["BulkInferrer"] == "skipped"


def test_runs_lineage_of_a_deleted_artifact_says_it_is_gone(root, capsys):
    # The first run's rejected rows: no other test here reads them.
    uri = os.path.join(root, "runs", "first", "rejected")
    code, out, err = _runs(capsys, root, "lineage", uri)
    assert code == 0 and f"{uri} (published, fingerprint" in out, out
    shutil.rmtree(uri)
    code, out, err = _runs(capsys, root, "lineage", uri)
    assert code == 0, err
    assert f"{uri} (published, then deleted: gone from disk, fingerprint" in out, out
    code, out, err = _runs(capsys, root, "lineage", uri, "--json")
    assert json.loads(out)["artifact"]["exists"] is False


def test_no_cache_says_that_the_analyzer_cache_is_transforms_own(runs):
    # `--no_cache` printed "analyzer cache reused" without a word: read as if Transform
    # had been reused after all.
    root, printed = runs
    with open(os.path.join(root, "runs", "third", "summary.json")) as f:
        transform = {s["stage"]: s for s in json.load(f)["stages"]}["Transform"]
    assert transform["status"] == "ok"
    assert transform["details"]["analyzer_cache"] == "reused (no analyzer recomputed)"
    (line,) = [x for x in printed["third"] if x.startswith("Transform: ")]
    assert (
        "analyzer cache reused (no analyzer recomputed); --no_cache reran Transform, not its "
        "analyzers: --no_analyzer_cache does" in line
    ), line
