"""TFX's own penguin module file on a portable runner: the README's worker pool and flags.

The portable half of ``tests/test_tfx_modules.py`` (which has the module files, the
helpers and the figures behind the accuracy floor), in a file of its own so that
pytest-xdist runs the two whole tuned runs side by side.
"""

from __future__ import annotations

import os
import shutil

import pytest
from test_tfx_modules import (
    ACCURACY_FLOOR,
    MODULES,
    TFX_DIR,
    _serve_accuracy,
    _tune_and_train,
)

from beam_pipeline import cli
from beam_pipeline.engine.events import RunEvents


@pytest.mark.slow
@pytest.mark.parametrize("keras_way", ["tf.keras"])
def test_tfx_penguin_module_tunes_and_trains_on_a_portable_runner(
    keras_way, readme_worker_pool, tmp_path, monkeypatch
):
    """The README's worker pool and run command (only the port changed), TFX's module.

    The module's folder is a user's own (a copy of the two files, ``penguin_utils_base``
    beside the module): the pool's workers run from the repository's root and import the
    helper only from the staged folder.
    """
    address, log_path, readme_run = readme_worker_pool
    root = str(tmp_path / "root")
    user = tmp_path / "user"
    user.mkdir()
    for name in (os.path.basename(MODULES[keras_way]), "penguin_utils_base.py"):
        shutil.copy(os.path.join(TFX_DIR, name), user / name)
    portable = readme_run[3:]  # the README's flags, as `python -m beam_pipeline` parses them
    run_id = keras_way.replace(" ", "_")
    # The model checks are the DirectRunner test's (they cost a minute here).
    off = ["--no_evaluator", "--no_infra_validator"]
    # The CLI's run events, with each Beam job recorded as its stage announces it (what
    # the progress display hears): its counters read through the job service at once.
    jobs = []

    class RecordedEvents(RunEvents):
        def __init__(self):
            super().__init__()
            self.subscribe(
                job_submitted=lambda info, read, _stage: jobs.append((info, read, read()))
            )

    monkeypatch.setattr(cli, "RunEvents", RecordedEvents)
    try:
        stages = _tune_and_train(
            root,
            run_id,
            str(user / os.path.basename(MODULES[keras_way])),
            *portable,
            *off,
            monkeypatch=monkeypatch,
        )
    except BaseException:
        print(log_path.read_text()[-6000:])  # the workers' side of the story
        raise
    example_gen, transform = stages["ExampleGen"], stages["Transform"]
    tuner, trainer = stages["Tuner"], stages["Trainer"]
    assert example_gen["status"] == "ok" and example_gen["rows_in"] == {"all": 334}
    assert sum(example_gen["rows_out"].values()) == 334 and example_gen["rows_rejected"] == 0
    assert transform["status"] == "ok" and transform["rows_out"] == example_gen["rows_out"]
    assert tuner["status"] == "ok", tuner["note"]
    assert tuner["details"]["trials"] == 6 and tuner["details"]["completed"] == 6
    # The embedded job service's default: a job per trial (a job there gets one worker).
    assert tuner["details"]["schedule"] == "rolling"
    assert trainer["status"] == "ok", trainer["note"]
    # The trials and the training step ran in the pool's workers, not in this process.
    workers = [*tuner["details"]["workers"], trainer["details"]["worker"]]
    assert all(int(w.rsplit(":", 1)[1]) != os.getpid() for w in workers), workers
    served = _serve_accuracy(trainer["artifact"])
    print(f"served {keras_way}: {served}, best {tuner['details']['best_hyperparameters']}")
    assert served["n"] == 334
    assert served["accuracy"] >= ACCURACY_FLOOR, served
    # One worker per job at least: data, Transform, training, and a job per trial, each a
    # fork of the pool's zygote (beam_pipeline.runtime.worker_pool): a ready spare, or forked on
    # request when none was ready; none a fresh interpreter ("Starting worker").
    log = log_path.read_text()
    fresh, spares = log.count("Starting worker"), log.count(" is spare worker ")
    forked = log.count(" is forked worker ")
    assert fresh == 0 and spares + forked >= 9 and spares >= 1, (fresh, spares, forked)
    # The job service's ids reach the summary (on Dataflow: the job id and console link).
    assert example_gen["details"]["job"]["job_id"] and transform["details"]["job"]["job_id"]
    # The jobs were announced with a way to read their counters from the job service;
    # Beam's embedded service reports them only once a job has ended: at submission the
    # read gave nothing (or, had the job ended already, the final counts), never a guess;
    # after the run it gives the counts the summary holds.
    assert [info.job_id for info, _, _ in jobs[:2]] == [
        example_gen["details"]["job"]["job_id"],
        transform["details"]["job"]["job_id"],
    ]
    final = [
        {
            "example_gen.rows_read": 334,
            **{f"example_gen.rows_out.{s}": n for s, n in example_gen["rows_out"].items()},
        },
        {f"transform.rows_out.{s}": n for s, n in transform["rows_out"].items()},
    ]
    for (_, read, at_submission), counts in zip(jobs, final):
        now = {k: v for k, v in read().items() if k in counts}
        assert now == counts and at_submission in ({}, read())
