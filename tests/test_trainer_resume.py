"""Preemption: a bundled run_fn's training process killed midway resumes at its last
finished epoch when run again (Keras's BackupAndRestore). A TrainSpec's checkpoint resume
and a finished training not redone are checked in test_resume.py (a kill of the CLI run
during training and export, and a rerun of the finished job)."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import signal
import time

import conftest_trainer
import pytest

from beam_pipeline.core.types import Artifact
from beam_pipeline.stages.trainer.training import EXPORT_SUBDIR, build_training_job
from trainer import run_trainer

penguin_run_dir = conftest_trainer.penguin_run_dir

# Eval accuracy (5 batches of 10) after the resumed training of the bundled run_fn: 200
# steps, killed after epoch 1, measured 0.98, 1.0, 1.0 in 3 runs of this test (uninterrupted
# at 600 steps 0.98-1.0); a margin of 4 examples of 50.
ACCURACY_FLOOR = 0.9

_SCRIPT = """
import dataclasses, json, sys
from beam_pipeline.engine.run_dir import RunDirectory
from beam_pipeline.stages.trainer.training import build_training_job
from trainer import run_trainer
import conftest_trainer

# The worker is preempted right after it wrote its first epoch's backup: it waits there for
# the test's SIGKILL, so the kill lands between two epochs whatever the machine's load, never
# after training ended (the backup's writes themselves are trainer.callbacks' own).
import threading
from trainer import callbacks

_save_model = callbacks.BackupAndRestore._save_model


def _save_then_wait_for_the_kill(self):
    _save_model(self)
    threading.Event().wait()


callbacks.BackupAndRestore._save_model = _save_then_wait_for_the_kill

root, steps = sys.argv[1], int(sys.argv[2])
config = conftest_trainer.penguin_config(train_steps=steps, eval_steps=5)
job = build_training_job(config, RunDirectory(root, conftest_trainer.RUN_ID))
print(json.dumps(dataclasses.asdict(run_trainer(job))))
"""


def _start(root: str, steps: int):
    """The bundled run_fn's training of ``steps`` steps in a process of its own (forked with
    the ML stack imported, tests/forked_launch.py: a kill of a process, not a fresh start,
    is what is tested)."""
    import forked_launch

    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([conftest_trainer.REPO, os.path.dirname(__file__)]),
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    return forked_launch.launch_code(
        _SCRIPT, [root, str(steps)], conftest_trainer.REPO, env, root + "-launch"
    )


def _kill_once_exists(proc, path: str) -> None:
    """SIGKILLs ``proc`` (as a preempted worker) as soon as ``path`` exists (and also when
    the wait fails: the process waits for its kill)."""
    deadline = time.time() + 120
    try:
        while not os.path.exists(path):
            assert proc.poll() is None, proc.stderr[-3000:]
            assert time.time() < deadline, f"{path} did not appear within 120 s"
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)


def _events_files(train_logs: str) -> set[str]:
    return set(glob.glob(os.path.join(train_logs, "events.out.tfevents.*")))


def _first_epoch_logged(train_logs: str, before: set[str]) -> int | None:
    """The first epoch logged by the attempt that wrote the one TensorBoard events file in
    ``train_logs`` not in ``before``. (Not the last file by name: a name holds its writer's
    start in whole seconds, then its process id, so two attempts that start in the same
    second sort by process id, the killed worker's often after the attempt that followed.)"""
    import tensorflow as tf

    (path,) = _events_files(train_logs) - before
    events = [tf.compat.v1.Event.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)]
    steps = [e.step for e in events if any(v.tag == "epoch_loss" for v in e.summary.value)]
    return min(steps) if steps else None


@pytest.mark.slow
def test_bundled_run_fn_resumes_with_backup_and_restore(penguin_run_dir, tmp_path):
    # The TFX-style run_fn owns its loop: Keras's BackupAndRestore in model_run/backup
    # resumes at the last finished epoch; TensorBoard's epoch axis shows where it restarted.
    root = str(tmp_path / "root")
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, root)
    model_run = run_dir.path(Artifact.MODEL_RUN)
    metadata = os.path.join(model_run, "backup", "training_metadata.json")
    train_logs = os.path.join(model_run, "train")
    steps = 200  # 10 epochs of 20 steps

    _kill_once_exists(_start(root, steps), metadata)
    with open(metadata) as f:
        killed_at_epoch = json.load(f)["epoch"]
    assert killed_at_epoch == 1
    killed_attempt_logs = _events_files(train_logs)

    # The second attempt in this process (TensorFlow is imported here already).
    config = conftest_trainer.penguin_config(train_steps=steps, eval_steps=5)
    result = dataclasses.asdict(run_trainer(build_training_job(config, run_dir)))
    assert result["module_kind"] == "run_fn" and not result["reused"]
    with open(metadata) as f:
        assert json.load(f)["epoch"] == 10
    # The second attempt started at the saved epoch.
    assert _first_epoch_logged(train_logs, killed_attempt_logs) == killed_at_epoch
    assert result["metrics"]["sparse_categorical_accuracy"] >= ACCURACY_FLOOR

    # A kill in the middle of writing the backup, made exact: the state a worker killed while
    # it wrote the last epoch's weights leaves (Keras writes them in place, so the file is
    # truncated; the metadata still names the epoch before, as its .bkp copy does; no result,
    # no export). The module's double_checkpoint resumes from the previous copy.
    from trainer.run_training import RESULT_FILE

    weights = os.path.join(model_run, "backup", "latest.weights.h5")
    with open(weights, "r+b") as f:
        f.truncate(96)  # what h5py reported of such a file: "truncated file: eof = 96"
    with open(metadata + ".bkp") as f:
        previous_epoch = json.load(f)["epoch"]
    assert previous_epoch == 9
    shutil.copyfile(metadata + ".bkp", metadata)
    os.remove(os.path.join(model_run, RESULT_FILE))
    shutil.rmtree(run_dir.path(Artifact.MODEL_RUN, EXPORT_SUBDIR))
    earlier_logs = _events_files(train_logs)
    result = dataclasses.asdict(run_trainer(build_training_job(config, run_dir)))
    assert not result["reused"]
    assert _first_epoch_logged(train_logs, earlier_logs) == previous_epoch
    with open(metadata) as f:
        assert json.load(f)["epoch"] == 10


def _small_fit(backup_dir: str, callback_class, epochs: int = 3) -> list[int]:
    """Fits a small seeded model with ``callback_class``; returns the epochs it ran."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    y = (x.sum(axis=1) > 0).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    history = model.fit(
        x,
        y,
        epochs=epochs,
        batch_size=16,
        verbose=0,
        callbacks=[callback_class(backup_dir, delete_checkpoint=False)],
    )
    return history.epoch


def test_a_kill_during_the_first_backup_leaves_a_state_the_next_attempt_resumes(tmp_path):
    """Keras's BackupAndRestore writes its weights file in place: a worker killed while it
    writes the first backup leaves a truncated file and no previous copy, and every later
    attempt fails to restore until someone deletes the folder. trainer.callbacks' writes
    beside the final name and renames: the same kill leaves a partial file that nothing
    reads, and the next attempt starts at epoch 0."""
    import keras

    from trainer.callbacks import BackupAndRestore

    # Keras's own callback, killed during its first weights write (the file as a killed
    # h5py write leaves it: "truncated file: eof = 96", seen in the bundled module's runs).
    theirs = tmp_path / "keras"
    theirs.mkdir()
    (theirs / "latest.weights.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(88))
    with pytest.raises(OSError):
        _small_fit(str(theirs), keras.callbacks.BackupAndRestore)

    # Ours, killed at the same point: its weights were going to the partial file.
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "latest.partial.weights.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(88))
    assert _small_fit(str(ours), BackupAndRestore) == [0, 1, 2]  # from the start
    assert sorted(os.listdir(ours)) == ["latest.weights.h5", "training_metadata.json"]
    with open(ours / "training_metadata.json") as f:
        assert json.load(f) == {"epoch": 3, "batch": 0}
    # And it resumes as Keras's does: a later attempt of 5 epochs runs only the last two.
    assert _small_fit(str(ours), BackupAndRestore, epochs=5) == [3, 4]
