"""Every stage's on/off switch (``--no_<stage>``) is part of its cache key: a stage switched
off in one run runs again in the next run that switches it on, on the same pipeline root
(it once reused the skip: ``--no_evaluator`` then a plain run said "Evaluator skipped:
--no_evaluator").

The switches come from the graph's declarations (a Config field made by
:func:`beam_pipeline.engine.stage.switch`), so a new stage with a switch is tested here
without editing this file.
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


def test_the_graph_declares_switches():
    assert {"Tuner", "Trainer", "Evaluator", "InfraValidator"} <= {n for n, _ in SWITCHES}


def _check_on(root: str, run_id: str, stage: str, flag: str, off: str) -> None:
    """``stage`` did its work in ``run_id`` (its own run's, or reused from a run that had it
    on), not reused the skip that run ``off`` recorded."""
    row = _stages(root, run_id)[stage]
    assert row["status"] in ("ok", "cached") and flag not in row["note"], row
    assert row["artifact"] and f"from run {off}" not in row["note"], row
    assert _recorded(root, run_id)[stage] in ("complete", "cached")


def test_every_switch_off_then_on_again_runs_each_stage(tmp_path):
    """One root: a run with every switch on, then one run per switch, in graph order, with
    that switch off and the one before it on again (the stages before it as the first run
    had them: the same inputs, so that only the switch tells its key from the skip's),
    then every switch on again."""
    root = str(tmp_path)
    assert cli.main([f"--pipeline_root={root}", "--run_id=all_on", *_CHEAP]) == 0
    before = None
    for stage, flag in SWITCHES:
        off = f"off_{stage}"
        assert cli.main([f"--pipeline_root={root}", f"--run_id={off}", flag, *_CHEAP]) == 0
        row = _stages(root, off)[stage]
        assert row["status"] == "skipped" and flag in row["note"], row
        assert _recorded(root, off)[stage] == "skipped"
        if before is not None:
            _check_on(root, off, *before)
        before = (stage, flag, off)
    assert cli.main([f"--pipeline_root={root}", "--run_id=on_again", *_CHEAP]) == 0
    _check_on(root, "on_again", *before)
