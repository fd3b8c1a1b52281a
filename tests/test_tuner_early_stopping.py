"""Tuner early stopping (``--tuner_early_stopping asha``): asynchronous successive halving.

The rung rule as a table; a search through the CLI where a planted bad region (a learning
rate of 0, ``tests/testdata/tiny_tuner_module.py``: its loss stays ln 2) is stopped at the
first rung and the good trial trains to the end; and a worker process that dies after its
trial was stopped, on each schedule that hands trials to one worker process at a time: the
trial is not trained again, and the statuses come out right.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
from typing import Optional

import conftest_trainer
import pytest
from test_tuner import TINY, _job

from beam_pipeline import cli
from beam_pipeline.config import PipelineConfig, TrainerConfig, TunerConfig, TunerSchedule
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import Artifact
from beam_pipeline.runtime.options import parse_beam_args
from beam_pipeline.runtime.pool import LocalWorkerPool
from beam_pipeline.stages.tuner.trials import TRIALS_CSV, TRIALS_JSON
from beam_pipeline.stages.tuner.tuning import (
    BEST_HYPERPARAMETERS_FILE,
    build_tuning_job,
    run_tuning_stage,
)
from trainer.tuning import (
    EarlyStopping,
    EarlyStoppingRule,
    OracleDriver,
    TrialRunner,
    TuningJob,
    load_tuner,
)
from trainer.tuning.early_stopping import check_rungs, goes_on, goes_on_median, start_rungs

penguin_run_dir = conftest_trainer.penguin_run_dir

# Two trials in grid order: the good rate first (it reaches each rung alone and goes on),
# then the planted bad region (a rate of 0: its loss stays ln 2).
GOOD_THEN_BAD = {"learning_rates": [0.1, 0.0], "epochs": 9, "objective": "val_loss"}
ASHA = ["--tuner_early_stopping=asha", "--asha_min_epochs=3"]  # rungs: 3 (9 is the end)


@pytest.mark.parametrize(
    "value, recorded, factor, direction, goes",
    [
        (0.9, [0.9], 3, "max", True),  # the first at a rung always goes on
        (0.5, [0.9, 0.5], 3, "max", False),
        (0.9, [0.5, 0.9], 3, "max", True),
        (0.2, [0.2, 0.6], 2, "min", True),
        (0.6, [0.2, 0.6], 2, "min", False),
        (0.5, [0.1, 0.5, 0.9], 2, "min", True),  # the median goes on at factor 2...
        (0.5, [0.1, 0.5, 0.9], 3, "min", False),  # ...not in the top third
        (math.nan, [math.nan], 3, "max", False),
    ],
)
def test_a_trial_goes_on_only_in_the_top_fraction_of_its_rung(
    value, recorded, factor, direction, goes
):
    assert goes_on(value, recorded, factor, direction) is goes


@pytest.mark.parametrize(
    "value, others, direction, goes",
    [
        (0.5, [], "max", True),  # the first at a rung goes on
        (0.5, [0.4, 0.9], "max", False),  # below the others' median 0.65
        (0.7, [0.4, 0.9], "max", True),
        (0.3, [0.2, 0.6, 0.9], "min", True),  # at most the median 0.6
        (0.7, [0.2, 0.6, 0.9], "min", False),
        (math.nan, [0.1], "min", False),
    ],
)
def test_the_median_rule_keeps_a_trial_at_least_as_good_as_the_others_median(
    value, others, direction, goes
):
    assert goes_on_median(value, others, direction) is goes


def _tiny_job(tmp_path, custom: dict, rule: Optional[EarlyStopping] = None) -> TuningJob:
    """test_tuner's job of the tiny module, with an early-stopping rule."""
    return dataclasses.replace(_job(tmp_path, **custom), early_stopping=rule or EarlyStopping())


@pytest.mark.slow
def test_the_median_rule_stops_the_bad_region_in_a_search(tmp_path):
    """The whole search in this process (the launcher's driver, a worker's runner)."""
    job = _tiny_job(tmp_path, GOOD_THEN_BAD, EarlyStopping(EarlyStoppingRule.MEDIAN, 3, 3))
    oracle = OracleDriver(load_tuner(job, job.tuner_dir).tuner, 1, None, "tiny")
    start_rungs(oracle.project_dir)
    runner = TrialRunner(job)
    while specs := oracle.next_round():
        oracle.report({s.trial_id: runner.run(s) for s in specs})
    records = oracle.records()
    rows = [(r.hyperparameters["learning_rate"], r.status.value, r.epochs) for r in records]
    assert rows == [(0.1, "COMPLETED", 9), (0.0, "STOPPED", 3)]
    assert oracle.best_trial_id() == "0"


@pytest.mark.parametrize(
    "custom, min_epochs, refused",
    [
        ({"epochs": 1}, 1, True),  # one epoch: no rung before the end
        ({"epochs": 3}, 3, True),
        ({"epochs": 4}, 3, False),
        ({"epochs": 1, "tuner": "hyperband"}, 1, False),  # Hyperband sets the epochs
    ],
)
def test_early_stopping_that_could_never_stop_a_trial_is_refused(
    tmp_path, custom, min_epochs, refused
):
    job = _tiny_job(tmp_path, custom)
    rule = EarlyStopping(EarlyStoppingRule.ASHA, 3, min_epochs)
    loaded = load_tuner(job, job.tuner_dir)
    if not refused:
        check_rungs(rule, loaded, "m.py")
        return
    with pytest.raises(PipelineError, match=r"can never stop a trial of m\.py: its fit runs"):
        check_rungs(rule, loaded, "m.py")


@pytest.mark.parametrize("rule, epochs", [("asha", 4), ("median", 4), ("none", 1)])
def test_the_bundled_module_fits_in_epochs_when_trials_can_stop(
    penguin_run_dir, tmp_path, rule, epochs
):
    """With early stopping on, the bundled tuner_fn fits the same steps in epochs, so the
    rule has rungs to stop at (with one epoch the run would refuse the flag)."""
    module = conftest_trainer.PENGUIN_MODULE
    config = PipelineConfig(
        module_file=module, tuner=TunerConfig(early_stopping=rule, train_steps=20)
    )
    job = build_tuning_job(config, penguin_run_dir, module, str(tmp_path / "tuner"))
    loaded = load_tuner(job, job.tuner_dir)
    fit = loaded.fit_kwargs
    assert (fit["epochs"], fit["epochs"] * fit["steps_per_epoch"]) == (epochs, 20)
    check_rungs(EarlyStopping(EarlyStoppingRule.ASHA), loaded, "penguin") if epochs > 1 else None


def _rows(path: str) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_the_cli_stops_a_bad_region_at_the_first_rung_and_trains_a_good_one_to_the_end(
    tmp_path, capsys
):
    module = tmp_path / "module.py"  # the bundled preprocessing_fn, the tiny tuner_fn
    with open(conftest_trainer.PENGUIN_MODULE) as penguin, open(TINY) as tiny:
        module.write_text(penguin.read() + tiny.read().replace("from __future__", "#"))
    root = tmp_path / "root"
    code = cli.main(
        [
            f"--data={conftest_trainer.PENGUIN_CSV}",
            "--csv_null_values=,NA",
            f"--module_file={module}",
            f"--pipeline_root={root}",
            "--run_id=asha",
            "--no_trainer",
            "--no_progress",
            "--tuner_parallel_trials=1",
            f"--custom_config={json.dumps(GOOD_THEN_BAD)}",
            *ASHA,
        ]
    )
    assert code == 0
    tuner = root / "runs" / "asha" / "tuner"
    rows = _rows(str(tuner / TRIALS_CSV))
    assert [(r["learning_rate"], r["status"], r["epochs"], r["rung"]) for r in rows] == [
        ("0.1", "COMPLETED", "9", "0"),
        ("0.0", "STOPPED", "3", "0"),
    ]
    assert float(rows[1]["objective"]) == pytest.approx(math.log(2), abs=1e-6)
    with open(tuner / BEST_HYPERPARAMETERS_FILE) as f:
        assert json.load(f)["values"]["learning_rate"] == 0.1
    report = (root / "runs" / "asha" / "report.html").read_text()
    assert "<th>epochs</th><th>rung</th>" in report and "<td>STOPPED</td>" in report
    with open(root / "runs" / "asha" / "summary.json") as f:
        (tuner_row,) = [s for s in json.load(f)["stages"] if s["stage"] == "Tuner"]
    counters = tuner_row["details"]["counters"]
    assert (counters["tuner.trials_stopped"], counters.get("tuner.trials_failed", 0)) == (1, 0)
    # runs show lists the search's outcome, the stopped trial and its epoch included.
    capsys.readouterr()
    assert cli.main(["runs", "show", "asha", f"--pipeline_root={root}"]) == 0
    shown = capsys.readouterr().out
    assert "Tuner: 2 trials: 1 completed, 1 stopped early (trial 1 at epoch 3), 0 failed" in shown


@pytest.fixture(scope="module")
def one_worker():
    """One warm worker process: one trial at a time, so the good trial reaches the rung
    first on every schedule."""
    with LocalWorkerPool(1, threads_per_worker=1) as warm:
        yield warm


# The abandoned job's gRPC reader threads raise when its worker process dies.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("schedule", [TunerSchedule.ROLLING, TunerSchedule.SEARCH_JOB])
def test_a_worker_lost_after_its_trial_was_stopped_does_not_train_it_again(
    penguin_run_dir, one_worker, tmp_path, schedule
):
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, str(tmp_path / "root"))
    fits, marker = tmp_path / "fits", str(tmp_path / "exited")
    fits.mkdir()
    custom = {**GOOD_THEN_BAD, "fits": str(fits), "exit_once_stopped": marker}
    config = PipelineConfig(
        module_file=TINY,
        trainer=TrainerConfig(custom_config=json.dumps(custom)),
        tuner=TunerConfig(
            schedule=schedule,
            parallel_trials=1,
            early_stopping="asha",
            asha_min_epochs=3,
            lease_seconds=2,  # search_job: the lost loop's trial is re-issued soon
        ),
    )
    restarts = one_worker.restarts
    options = parse_beam_args(
        [
            "--runner=DirectRunner",
            "--direct_running_mode=multi_processing",
            "--direct_num_workers=1",
        ]
    )
    report, _ = run_tuning_stage(config, run_dir, options, worker_pool=one_worker)
    assert os.path.exists(marker) and one_worker.restarts == restarts + 1
    with open(run_dir.path(Artifact.TUNER, TRIALS_JSON)) as f:
        trials = json.load(f)["trials"]
    assert [(t["status"], t["epochs"], t["attempts"]) for t in trials] == [
        ("COMPLETED", 9, 1),
        ("STOPPED", 3, 1),
    ]
    assert len(os.listdir(fits)) == 2  # the stopped trial's rerun did not fit again
    assert report.details["stopped"] == 1 and report.details["best_trial"] == "0"
