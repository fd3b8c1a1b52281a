"""Preemption: a training process killed midway resumes from its checkpoint when run again,
and a finished one is not redone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import conftest_trainer
import pytest

from beam_pipeline.core.types import Artifact
from beam_pipeline.training_stage import build_training_job
from trainer import RESULT_FILE, run_trainer

penguin_run_dir = conftest_trainer.penguin_run_dir

TRAIN_STEPS = 1000
CHECKPOINT_EVERY = 100
# Eval accuracy (5 batches of 10) after a finished training. Measured uninterrupted on this
# machine, 3 runs each: ResumableSpec at 1000 steps 0.98-1.0, the bundled run_fn at 600
# steps 0.98-1.0; a margin of 4 examples of 50.
ACCURACY_FLOOR = 0.9

_MODULE = f"""
from beam_pipeline.examples.penguin.penguin_module import PenguinSpec


class ResumableSpec(PenguinSpec):
    checkpoint_every = {CHECKPOINT_EVERY}
"""

_SCRIPT = """
import dataclasses, json, sys
from beam_pipeline.run_dir import RunDirectory
from beam_pipeline.training_stage import build_training_job
from trainer import run_trainer
import conftest_trainer

root, module, steps = sys.argv[1], sys.argv[2] or conftest_trainer.PENGUIN_MODULE, int(sys.argv[3])
config = conftest_trainer.penguin_config(module, train_steps=steps, eval_steps=5)
job = build_training_job(config, RunDirectory(root, conftest_trainer.RUN_ID))
print(json.dumps(dataclasses.asdict(run_trainer(job))))
"""


def _start(root: str, module: str, steps: int = TRAIN_STEPS) -> subprocess.Popen:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([conftest_trainer.REPO, os.path.dirname(__file__)]),
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    return subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, root, module, str(steps)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _latest_step(checkpoints: str) -> int:
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(checkpoints)
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def _kill_once_exists(proc: subprocess.Popen, path: str) -> None:
    """SIGKILLs ``proc`` (as a preempted worker) as soon as ``path`` exists."""
    deadline = time.time() + 120
    while not os.path.exists(path):
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.time() < deadline, f"{path} did not appear within 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _finish(proc: subprocess.Popen) -> dict:
    stdout, stderr = proc.communicate(timeout=240)
    assert proc.returncode == 0, stderr.decode()[-3000:]
    return json.loads(stdout.decode().strip().splitlines()[-1])


def _first_epochs_logged(train_logs: str) -> list[int]:
    """Per attempt (one TensorBoard events file each), the first epoch it logged."""
    import tensorflow as tf

    firsts = []
    for name in sorted(os.listdir(train_logs)):
        events = [
            tf.compat.v1.Event.FromString(r.numpy())
            for r in tf.data.TFRecordDataset(os.path.join(train_logs, name))
        ]
        steps = [e.step for e in events if any(v.tag == "epoch_loss" for v in e.summary.value)]
        firsts.append(min(steps) if steps else None)
    return firsts


@pytest.mark.slow
def test_killed_training_resumes_from_its_checkpoint(penguin_run_dir, tmp_path):
    root = str(tmp_path / "root")
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, root)
    module = tmp_path / "resumable_module.py"
    module.write_text(_MODULE)
    model_run = run_dir.path(Artifact.MODEL_RUN)
    checkpoints = os.path.join(model_run, "checkpoints")

    # Attempt 1: killed (SIGKILL, as a preempted worker) once a checkpoint is on disk.
    _kill_once_exists(_start(root, str(module)), os.path.join(checkpoints, "checkpoint"))
    killed_at = _latest_step(checkpoints)
    assert 0 < killed_at < TRAIN_STEPS and killed_at % CHECKPOINT_EVERY == 0
    assert not os.path.exists(os.path.join(model_run, RESULT_FILE))

    # Attempt 2: the same job starts from that step and finishes.
    result = _finish(_start(root, str(module)))
    assert result["start_step"] == killed_at
    assert result["final_step"] == TRAIN_STEPS
    assert _latest_step(checkpoints) == TRAIN_STEPS
    assert result["metrics"]["sparse_categorical_accuracy"] >= ACCURACY_FLOOR

    # Attempt 3: finished, so nothing is redone (the SavedModel is not even rewritten).
    saved_model = os.path.join(result["serving_model_dir"], "saved_model.pb")
    mtime = os.stat(saved_model).st_mtime_ns
    job = build_training_job(
        conftest_trainer.penguin_config(str(module), train_steps=TRAIN_STEPS, eval_steps=5),
        run_dir,
    )
    started = time.time()
    again = run_trainer(job)
    assert again.reused and time.time() - started < 5
    assert (again.start_step, again.final_step) == (killed_at, TRAIN_STEPS)
    assert os.stat(saved_model).st_mtime_ns == mtime


@pytest.mark.slow
def test_bundled_run_fn_resumes_with_backup_and_restore(penguin_run_dir, tmp_path):
    # The TFX-style run_fn owns its loop: Keras's BackupAndRestore in model_run/backup
    # resumes at the last finished epoch; TensorBoard's epoch axis shows where it restarted.
    root = str(tmp_path / "root")
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, root)
    model_run = run_dir.path(Artifact.MODEL_RUN)
    metadata = os.path.join(model_run, "backup", "training_metadata.json")
    steps = 600  # 10 epochs of 60 steps

    _kill_once_exists(_start(root, "", steps), metadata)
    with open(metadata) as f:
        killed_at_epoch = json.load(f)["epoch"]
    assert 0 < killed_at_epoch < 10

    result = _finish(_start(root, "", steps))
    assert result["module_kind"] == "run_fn" and not result["reused"]
    with open(metadata) as f:
        assert json.load(f)["epoch"] == 10
    logged = _first_epochs_logged(os.path.join(model_run, "train"))
    assert logged[-1] == killed_at_epoch  # the second attempt started at the saved epoch
    assert result["metrics"]["sparse_categorical_accuracy"] >= ACCURACY_FLOOR
