"""Every stage's on/off switch (``--no_<stage>``) is part of its cache key: a stage switched
off in one run runs again in the next run that switches it on, on the same pipeline root
(it once reused the skip: ``--no_evaluator`` then a plain run said "Evaluator skipped:
--no_evaluator").

The switches come from the graph's declarations (a Config field ``enabled`` that is a
``switch`` setting), so a new stage with a switch is tested here without editing this file.
"""

from __future__ import annotations

import json
import os

import pytest

from beam_pipeline import cli
from beam_pipeline.stages.graph import STAGE_GRAPH

pytestmark = pytest.mark.slow

# The fewest trials and steps that still tune, train, evaluate and serve a model.
_CHEAP = [
    "--train_steps=1",
    "--eval_steps=1",
    "--tuner_max_trials=1",
    "--tuner_parallel_trials=1",
    "--tuner_train_steps=1",
    "--tuner_eval_steps=1",
    "--no_progress",
]


# (stage name, its --no_ flag) of every stage of the graph that declares a switch.
SWITCHES = [(s.name, f"--no_{s.switch_flag()}") for s in STAGE_GRAPH if s.switch_flag()]


def _stages(root: str, run_id: str) -> dict[str, dict]:
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        return {s["stage"]: s for s in json.load(f)["stages"]}


def _recorded(root: str, run_id: str) -> dict[str, str]:
    """Stage -> its status as the metadata store shows it (``runs show --json``)."""
    from beam_pipeline.history.views import run_view
    from beam_pipeline.metadata import open_for_pipeline

    with open_for_pipeline(root, "", existing=True) as store:
        shown = run_view(store, run_id)
    return {e["stage"]: e["summary_status"] for e in shown["executions"]}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A pipeline root with one run of every stage switched on (the bundled example)."""
    path = str(tmp_path_factory.mktemp("switches"))
    assert cli.main([f"--pipeline_root={path}", "--run_id=all_on", *_CHEAP]) == 0
    stages = _stages(path, "all_on")
    assert all(stages[name]["status"] == "ok" for name, _ in SWITCHES), stages
    return path


def test_the_graph_declares_switches():
    assert {"Tuner", "Trainer", "Evaluator", "InfraValidator"} <= {n for n, _ in SWITCHES}


@pytest.mark.parametrize("stage,flag", SWITCHES, ids=[n for n, _ in SWITCHES])
def test_a_stage_switched_off_runs_again_once_switched_on(root, stage, flag):
    off, on = f"off_{stage}", f"on_{stage}"
    assert cli.main([f"--pipeline_root={root}", f"--run_id={off}", flag, *_CHEAP]) == 0
    row = _stages(root, off)[stage]
    assert row["status"] == "skipped" and flag in row["note"], row
    assert _recorded(root, off)[stage] == "skipped"

    # Switched on again: the stage's work, not the skip (its own run's, or reused from
    # the run that had it on).
    assert cli.main([f"--pipeline_root={root}", f"--run_id={on}", *_CHEAP]) == 0
    row = _stages(root, on)[stage]
    assert row["status"] in ("ok", "cached") and flag not in row["note"], row
    assert row["artifact"], row
    assert f"from run {off}" not in row["note"], row
    assert _recorded(root, on)[stage] in ("complete", "cached")
