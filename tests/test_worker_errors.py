"""Errors raised in a worker reach the user: exception type, message, the user's file:line.

A DoFn that runs the user's code raises on a worker of each DirectRunner mode and of the
portable runner: the error the job fails with becomes one sentence (``user_error``) naming
the exception, the user's file and line, and the Beam step. A tuning trial that raises
on the tuner's worker pool shows its exception in the CLI's error, with no Beam-internal
traceback on stderr.
"""

from __future__ import annotations

import json
import os
import re
import sys

import apache_beam as beam
import conftest_trainer
import pytest
from conftest import TESTDATA

from beam_pipeline import cli
from beam_pipeline.config import PipelineConfig, TrainerConfig, TunerConfig
from beam_pipeline.core.errors import EXIT_USER_ERROR, PipelineError, code_error, user_error
from beam_pipeline.core.user_module import load_module
from beam_pipeline.runtime.options import create_pipeline, parse_beam_args, run_pipeline
from beam_pipeline.stages.tuner.tuning import run_tuning_stage

penguin_run_dir = conftest_trainer.penguin_run_dir

RAISING_TUNER = os.path.join(TESTDATA, "raising_tuner_module.py")
TFX_CSV = os.path.join(TESTDATA, "penguin_tfx", "penguins_processed.csv")

_STEP_MODULE = """\
def step(x):
    if x == 3:
        raise ValueError(f"bad value {x}")
    return x
"""

MODES = {
    "in_memory": ["--direct_running_mode=in_memory"],
    # One worker process: a second adds a process start and nothing to what is checked.
    "multi_processing": ["--direct_running_mode=multi_processing", "--direct_num_workers=1"],
    "portable": ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"],
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_a_dofn_error_names_the_exception_the_users_line_and_the_step(mode, tmp_path):
    module_file = tmp_path / "user_steps.py"
    module_file.write_text(_STEP_MODULE)
    module = load_module(str(module_file))
    p = create_pipeline(parse_beam_args(MODES[mode]))
    _ = p | beam.Create([1, 2, 3]) | beam.Reshuffle() | "Check" >> beam.Map(module.step)
    with pytest.raises(Exception) as raised:
        run_pipeline(p, "Test").wait_until_finish()
    error = user_error(raised.value, str(tmp_path))
    assert error is not None and error.exit_code == EXIT_USER_ERROR
    assert str(error) == (
        f"ValueError: bad value 3, raised at {module_file}:3 in step 'Check'; fix the code "
        "there (or the input it was given)."
    )


def test_an_error_in_no_users_code_is_not_a_user_error():
    def ours():
        raise KeyError("a bug")

    try:
        ours()
    except KeyError as e:
        # This test file counts as the user's code; a frame of site-packages only does not.
        assert code_error(e) is not None
        assert code_error(RuntimeError(_beam_only_traceback())) is None


def _beam_only_traceback() -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "apache_beam/runners/common.py", line 1512, in process\n'
        f'  File "{os.path.dirname(beam.__file__)}/transforms/core.py", line 2128, in <lambda>\n'
        "KeyError: 'x' [while running 'Map(f)']\n"
    )


def _cli(args: list[str], monkeypatch) -> int:
    monkeypatch.setattr(sys, "argv", ["beam_pipeline", *args])  # as `python -m` has it
    return cli.main(args)


@pytest.mark.slow
def test_a_trial_that_raises_on_the_pool_shows_its_error_in_the_cli(tmp_path, monkeypatch, capfd):
    # Every trial's model-building function raises: each trial is recorded with its error,
    # and the search ends without a completed trial. One trial at a time: a pool of one
    # worker process (each process start costs seconds of imports).
    args = [
        f"--data={TFX_CSV}",
        f"--module_file={RAISING_TUNER}",
        f"--pipeline_root={tmp_path}",
        "--run_id=raising",
        "--tuner_parallel_trials=1",
    ]
    assert _cli(args, monkeypatch) == EXIT_USER_ERROR
    err = capfd.readouterr().err
    error_lines = [line for line in err.splitlines() if line.startswith("error: ")]
    said = (
        r"^error: None of the 2 tuning trials completed \(last error: ValueError: no penguin "
        r"model with \d units \(.*raising_tuner_module\.py:37\)\)"
    )
    assert len(error_lines) == 1 and re.search(said, error_lines[0]), err[-3000:]
    assert "Traceback" not in err, err[-3000:]  # no Beam-internal traceback on stderr


@pytest.mark.slow
def test_a_fatal_trial_error_stops_the_pool_without_beams_tracebacks(
    penguin_run_dir, tmp_path, capfd
):
    """A tf_keras (Keras 2) model: keras-tuner's fatal error stops the search while the other
    slot's trial job still runs on the pool; stopping the pool under it prints nothing."""
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, str(tmp_path / "root"))
    config = PipelineConfig(
        module_file=RAISING_TUNER,
        tuner=TunerConfig(parallel_trials=2, train_steps=1, eval_steps=1),
        trainer=TrainerConfig(custom_config=json.dumps({"tf_keras": True})),
    )
    options = parse_beam_args(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    said = (
        r"^Trial \d hit an error that stops the whole search \(FatalTypeError: Expected the "
        r"model-building function.*tf_keras"
    )
    with pytest.raises(PipelineError, match=said):
        run_tuning_stage(config, run_dir, options)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "RpcError" not in err, err[-3000:]


@pytest.mark.slow
def test_a_preprocessing_fn_op_that_fails_on_the_data_is_one_sentence(tmp_path, monkeypatch, capfd):
    module_file = os.path.join(TESTDATA, "failing_preprocessing_module.py")
    args = [
        f"--data={TFX_CSV}",
        f"--module_file={module_file}",
        f"--pipeline_root={tmp_path}",
        "--run_id=failing",
    ]
    assert _cli(args, monkeypatch) == EXIT_USER_ERROR
    err = capfd.readouterr().err
    assert (
        f"error: preprocessing_fn of {module_file} failed on the data in the Transform job "
        "with InvalidArgumentError: assertion failed: [body mass too high]"
    ) in err
    assert "Traceback" not in err, err[-3000:]
    assert not os.path.exists(os.path.join(tmp_path, "runs", "failing", "transform_graph"))


# Raises in every process but the test's own (pytest's, or pytest-xdist's worker, which also
# runs ``python -c``, so the command line cannot tell the two apart): the pool's processes.
# Imports in the launcher and in the oracle's process (trainer.isolation, named
# "tuner-oracle"), not in a trial's worker process.
_LAUNCHER_ONLY = """\
import multiprocessing, os

if os.getpid() != {pid} and multiprocessing.current_process().name != "tuner-oracle":
    raise ImportError("this module imports on the launcher only")
"""


@pytest.mark.slow
def test_a_module_that_fails_to_load_on_a_pool_worker_says_why(penguin_run_dir, tmp_path):
    """The trial's fatal result is written like any other: the launcher used to say only
    that no result came back from the worker. (One worker process: that is all it needs.)"""
    with open(os.path.join(TESTDATA, "tiny_tuner_module.py")) as f:
        tiny = f.read().replace("from __future__ import annotations\n", "")
    module_file = tmp_path / "launcher_only.py"
    module_file.write_text(_LAUNCHER_ONLY.format(pid=os.getpid()) + tiny)
    run_dir = conftest_trainer.copy_run_dir(penguin_run_dir, str(tmp_path / "root"))
    config = PipelineConfig(
        module_file=str(module_file),
        tuner=TunerConfig(parallel_trials=1, max_trials=2, train_steps=1, eval_steps=1),
    )
    options = parse_beam_args(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    said = (
        r"^Trial 0 hit an error that stops the whole search \(Module file .*launcher_only\.py:4 "
        r"raised ImportError: this module imports on the launcher only while being imported"
    )
    with pytest.raises(PipelineError, match=said):
        run_tuning_stage(config, run_dir, options)
