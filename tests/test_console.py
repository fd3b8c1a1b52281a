"""Quiet by default, everything with -v, all of it in the log: RunLog in a child process
whose stderr is a real descriptor 2 (as a user's terminal), with what each kind of noise
writes: a C-level write to descriptor 2 (TensorFlow's C++ logger), a known library notice,
a Python warning nobody filtered, the user's own warning and an error. The README's first
command's real output is checked in test_cli_runs.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO

_SCRIPT = """
import logging, os, sys, warnings
from beam_pipeline.console import OutputConfig, RunLog

output = OutputConfig(verbose=sys.argv[1] == "-v", log_file=sys.argv[2] or None)
with RunLog(output) as log:
    os.write(2, b"I0000 port.cc:153] oneDNN custom operations are on.\\n")  # as C++ does
    logging.getLogger("tensorflow").warning(
        "From x.py:3: parse_example_dataset is deprecated and will be removed in a future "
        "version."
    )
    warnings.warn("`shuffle=True` was passed, but will be ignored", UserWarning)
    warnings.warn("an unknown warning", UserWarning)
    logging.getLogger("beam_pipeline.stages.validation.checks").warning(
        "Split 'eval': feature 'x' is new"
    )
    logging.getLogger("apache_beam.runners").info("Running pipeline")
    from absl import logging as absl_logging  # as tf.Transform's graph_tools logs it
    absl_logging.warning(
        "Tables initialized inside a tf.function  will be re-initialized on every invocation "
        "of the function.: island/apply_vocab/text_file_init/InitializeTableFromTextFileV2"
    )
    print("error: the user's error", file=log.stderr)  # as the CLI shows its errors
    print("a module's own print", file=sys.stderr)
    print("a module's progress bar \x1b[1m1/1\x1b[0m", flush=True)
    log.attach(sys.argv[3])  # the run directory exists: a local log is written there now
    os.write(2, b"E0000 a C++ line after the run directory exists\\n")
    logging.getLogger("beam_pipeline").info("an INFO record after it")
    if sys.argv[4] == "kill":
        os.kill(os.getpid(), 9)
print("TF_CPP_MIN_LOG_LEVEL=" + os.environ.get("TF_CPP_MIN_LOG_LEVEL", "unset"))
"""

_USERS = [
    "UserWarning: an unknown warning",
    "WARNING beam_pipeline.stages.validation.checks: Split 'eval': feature 'x' is new",
    "error: the user's error",
]
_NOISE = [
    "oneDNN custom operations are on",
    "parse_example_dataset is deprecated",
    "`shuffle=True` was passed",
    "INFO apache_beam.runners: Running pipeline",
    "Tables initialized inside a tf.function",
]
# A module's own output (run_fn's prints, Keras's progress bars from model.fit): the log's.
_MODULE = ["a module's own print", "a module's progress bar"]


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_the_terminal_gets_the_users_business_and_the_log_gets_everything(tmp_path, verbose):
    log = tmp_path / "run.log"
    proc = _run(["-v" if verbose else "", str(log), str(tmp_path / "run"), "exit"])
    assert proc.returncode == 0, proc.stderr
    for line in _USERS:
        assert line in proc.stderr, proc.stderr
    for line in _NOISE:
        assert (line in proc.stderr) == verbose, (line, proc.stderr)
    text = log.read_text()
    for line in _USERS[:2] + _NOISE[1:] + ["INFO beam_pipeline: an INFO record after it"]:
        assert line in text, (line, text)
    assert (_NOISE[0] in text) != verbose  # a C-level line: in the log, or on the terminal
    for line in _MODULE:
        assert (line in proc.stdout + proc.stderr) == verbose, (line, proc.stdout)
        assert (line in text) != verbose, (line, text)
    assert ("\x1b[" in proc.stdout) == verbose
    expected = "unset" if verbose else "2"  # set before TensorFlow would load, unless -v
    assert proc.stdout.strip().splitlines()[-1] == f"TF_CPP_MIN_LOG_LEVEL={expected}"
    if not verbose:
        assert proc.stdout.strip() == f"TF_CPP_MIN_LOG_LEVEL={expected}"


def _run(args: list[str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT, *args],
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPATH=REPO),
        timeout=120,
    )


def test_a_killed_run_leaves_its_whole_log_in_the_run_directory(tmp_path):
    run_dir = tmp_path / "runs" / "killed"
    proc = _run(["", "", str(run_dir), "kill"])
    assert proc.returncode == -9, proc.stderr
    text = (run_dir / "run.log").read_text()  # written in place since the run dir existed
    assert "oneDNN custom operations are on" in text  # from before it existed
    assert "E0000 a C++ line after the run directory exists" in text
    assert "INFO beam_pipeline: an INFO record after it" in text
    assert "E0000" not in proc.stderr
