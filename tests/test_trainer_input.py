"""A TrainSpec's default training input: read once, then served from memory; and the
steps per call into TensorFlow that keep a fast accelerator busy.

On the penguin data (transformed by the session's fixture), with the bundled module's
``PenguinSpec`` (batches of 20).
"""

from __future__ import annotations

import glob
import os
import shutil

import conftest_trainer
import numpy as np
import pytest

from beam_pipeline.stages.trainer.training import build_training_job
from trainer.job import common_fn_args
from trainer.spec import TrainSpec, make_spec, steps_per_execution

penguin_run_dir = conftest_trainer.penguin_run_dir


def _spec(run_dir, **class_attributes):
    from trainer.module_loader import load_trainer_module

    config = conftest_trainer.penguin_config(train_steps=10, eval_steps=1)
    job = build_training_job(config, run_dir, entry_point="PenguinSpec")
    base = load_trainer_module(job.module_file, entry_point="PenguinSpec").spec_class
    spec_class = type("Spec", (base,), class_attributes)
    return make_spec(spec_class, common_fn_args(job, str(run_dir.root))), job


def _labels(batches) -> list[tuple]:
    return [tuple(np.asarray(label).tolist()) for _, label in batches]


@pytest.fixture
def run_dir(penguin_run_dir, tmp_path):
    return conftest_trainer.copy_run_dir(penguin_run_dir, str(tmp_path / "root"))


@pytest.mark.slow
def test_a_small_training_split_is_read_once_then_served_from_memory(run_dir):
    spec, job = _spec(run_dir)
    per_pass = spec.fn_args.num_examples["train"] // spec.batch_size
    dataset = spec.train_dataset(spec.default_hyperparameters())
    it = iter(dataset)
    first = [next(it) for _ in range(per_pass)]
    # The files are gone: only memory can serve the next passes.
    for pattern in job.train_files:
        for path in glob.glob(pattern):
            os.remove(path)
    second = [next(it) for _ in range(per_pass)]
    third = [next(it) for _ in range(per_pass)]
    assert all(len(b[1]) == spec.batch_size for b in first + second + third)
    # The same batches every pass, in a new order each pass.
    assert sorted(_labels(first)) == sorted(_labels(second)) == sorted(_labels(third))
    assert len({tuple(_labels(first)), tuple(_labels(second)), tuple(_labels(third))}) > 1


@pytest.mark.slow
def test_with_caching_off_each_pass_reads_the_files(run_dir):
    spec, job = _spec(run_dir, cache_max_mib=0)
    per_pass = spec.fn_args.num_examples["train"] // spec.batch_size
    it = iter(spec.train_dataset(spec.default_hyperparameters()))
    for _ in range(per_pass):
        next(it)
    folder = os.path.dirname(job.train_files[0])
    shutil.rmtree(folder)
    with pytest.raises(Exception, match="No such file|not found|NotFound"):
        for _ in range(3 * per_pass):
            next(it)


@pytest.mark.parametrize(
    "own, lengths, expected",
    [
        (None, (100,), 25),  # the largest divisor of 100 up to 32
        (None, (1000,), 25),
        (None, (64,), 32),
        (None, (100, 30), 10),  # a second, shorter fit: a divisor of both
        (None, (7,), 7),
        (None, (37,), 1),  # a prime above 32: one step per call
        (4, (100, 20), 4),
    ],
)
def test_steps_per_execution_divides_every_fit(own, lengths, expected):
    spec = type("Spec", (TrainSpec,), {"steps_per_execution": own})()
    assert steps_per_execution(spec, *lengths) == expected


def test_a_steps_per_execution_that_would_cross_a_checkpoint_is_refused():
    spec = type("Spec", (TrainSpec,), {"steps_per_execution": 8})()
    with pytest.raises(ValueError, match=r"Spec.steps_per_execution=8 does not divide"):
        steps_per_execution(spec, 100)
