"""What a Python-API run prints in the caller's process: its own output only. TensorFlow's
C++ lines, absl's and its libraries' notices go to the run's ``run.log``, not onto the
caller's stderr (a run printed 306 such lines although the docs said "logging is your
program's"); the caller's stdout and Python logging stay its own."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import PENGUIN_DIR, REPO

# A program of the user's: its own logging set up, a callback printing each stage's end
# (as docs/python-api.md shows), a data-only run, then a line of its own on stderr.
_PROGRAM = """
import logging, os, sys
import beam_pipeline as bp

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
handlers = list(logging.getLogger().handlers)
events = bp.RunEvents()
events.subscribe(stage_finished=lambda row: print("ended", row.stage))
config = bp.make_config(
    data=os.path.join({penguins!r}, "penguins.csv"),
    module_file=os.path.join({penguins!r}, "penguin_module.py"),
    csv_null_values=",NA",
    pipeline_root=sys.argv[1],
    run_id="api",
    trainer=False,
    tuner=False,
)
summary = bp.run(config, events=events)
assert logging.getLogger().handlers == handlers
logging.warning("the program's own warning")
print("statuses", *sorted({{row.status.value for row in summary.stages}}))
"""


def test_a_python_api_run_prints_no_tensorflow_lines_on_the_callers_stderr(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(_PROGRAM.format(penguins=PENGUIN_DIR))
    root = tmp_path / "root"
    # TensorFlow's own default, as a user's shell has it (the tests set it to 2).
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    proc = subprocess.run(
        [sys.executable, str(script), str(root)],
        cwd=str(tmp_path),
        env=dict(env, PYTHONPATH=REPO),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "WARNING the program's own warning\n"
    lines = proc.stdout.splitlines()
    assert "ended ExampleGen" in lines and "ended BulkInferrer" in lines, lines
    assert lines[-1] == "statuses ok skipped", lines
    assert os.path.getsize(root / "runs" / "api" / "run.log") > 0
