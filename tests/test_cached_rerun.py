"""A rerun that reuses every stage is bookkeeping only (issue 45): the CLI run again into
the same pipeline root, in a fresh interpreter, loads no module file (so imports neither
TensorFlow, keras-tuner nor tf.Transform), imports no Beam and starts no fork server (the
Tuner's pool and the user-code processes fork from it); once the module file is edited,
the stages that run its code run again.

The first run is a fork of the warm fork server (cheap); the rerun under test is a fresh
interpreter, whose ``sys.modules`` and fork server are its own, seen by a small wrapper
around ``python -m beam_pipeline`` as the process ends.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

from conftest import PENGUIN_DIR, REPO, forked_cli

# The bundled data and module, with a small search on a pool of 2 worker processes (a
# Tuner with 2 trials at a time starts that pool, forks of the fork server, unless it is
# reused); no model checks (TFMA's job and the serving check's sandbox are nothing this
# test looks at).
ARGS = [
    "--runner=DirectRunner",
    "--no_progress",
    f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}",
    "--csv_null_values=,NA",
    "--tuner_max_trials=2",
    "--tuner_parallel_trials=2",
    "--tuner_train_steps=2",
    "--tuner_eval_steps=1",
    "--train_steps=2",
    "--eval_steps=1",
    "--no_evaluator",
    "--no_infra_validator",
]
# What the rerun must not import: the module file's libraries, the model stages', and Beam
# (the input check, the flags' check and the look-ahead need none of it).
HEAVY = (
    "tensorflow",
    "keras",
    "keras_tuner",
    "tensorflow_transform",
    "tensorflow_model_analysis",
    "apache_beam",
)

# `python -m beam_pipeline ARGS` as a user's command, then what the process holds at its
# end: its exit code, the heavy modules it imported, whether it started a fork server.
_WRAPPER = r"""
import json, multiprocessing.forkserver, runpy, sys
out, args, heavy = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
sys.argv = ["beam_pipeline", *args]
code = 0
try:
    runpy.run_module("beam_pipeline", run_name="__main__", alter_sys=True)
except SystemExit as e:
    code = e.code
with open(out, "w") as f:
    json.dump({
        "code": code,
        "heavy": sorted(m for m in heavy if m in sys.modules),
        "fork_server": multiprocessing.forkserver._forkserver._forkserver_pid,
    }, f)
"""


def _statuses(root: str) -> dict[str, str]:
    """Each stage's status in the newest run under ``root``."""
    newest = max(glob.glob(os.path.join(root, "runs", "*", "summary.json")), key=os.path.getmtime)
    with open(newest) as f:
        return {row["stage"]: row["status"] for row in json.load(f)["stages"]}


def _fresh_rerun(args: list[str], tmp_path) -> dict:
    out = str(tmp_path / "process.json")
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, out, json.dumps(args), json.dumps(HEAVY)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(out) as f:
        return json.load(f)


def test_a_rerun_that_reuses_every_stage_loads_no_module_and_starts_no_fork_server(tmp_path):
    root = str(tmp_path / "root")
    module = str(tmp_path / "module" / "penguin_module.py")
    os.makedirs(os.path.dirname(module))
    shutil.copy(os.path.join(PENGUIN_DIR, "penguin_module.py"), module)
    args = [*ARGS, f"--module_file={module}", f"--pipeline_root={root}"]
    first = forked_cli(args)
    assert first.returncode == 0, first.stderr[-4000:]
    ran = _statuses(root)
    assert ran["Tuner"] == ran["Trainer"] == ran["Transform"] == "ok"

    rerun = _fresh_rerun(args, tmp_path)
    assert rerun["code"] == 0
    statuses = _statuses(root)
    assert {s for s in statuses.values()} <= {"cached", "skipped"}, statuses
    assert statuses["Tuner"] == statuses["Trainer"] == statuses["Transform"] == "cached"
    assert rerun["fork_server"] is None
    assert rerun["heavy"] == []

    # The module edited (its run_fn's file, not preprocessing_fn's code): the stages that
    # run its code run again; Transform, whose key holds preprocessing_fn's code, does not.
    with open(module, "a") as f:
        f.write("\n# edited\n")
    edited = forked_cli(args)
    assert edited.returncode == 0, edited.stderr[-4000:]
    statuses = _statuses(root)
    assert statuses["Trainer"] == statuses["Tuner"] == "ok", statuses
    assert statuses["Transform"] == "cached", statuses


# Two runs of the bundled data in one process: whether each asked the fork server to warm
# up (its imports: a core's seconds and about 600 MiB of the run's memory). In a fork of
# the test's fork server, whose own flag starts unset.
_WARMS = r"""
import json, os, sys
from beam_pipeline import cli
from beam_pipeline.core import forked
common, roots = json.loads(sys.argv[1]), json.loads(sys.argv[2])
warmed = []
for root, flags in roots:
    code = cli.main([*common, f"--pipeline_root={root}", *flags])
    warmed.append([code, forked._warm_up_started.is_set()])
print(json.dumps(warmed))
"""


def test_a_data_only_run_in_memory_starts_no_fork_server_and_a_training_run_does(tmp_path):
    """Transform's Beam workers are forks in multi_processing mode only, and the
    InfraValidator of a run without the Trainer has no model to serve: a data-only run
    in_memory warms no fork server (it did: 2,112 MiB of peak tree memory at 1M taxi rows
    against 1,451 MiB without it). The next run, with a Trainer, warms it as it starts."""
    import forked_launch

    # The InfraValidator switched on (skipped for want of a model in the data-only run).
    drop = ("--tuner", "--no_infra_validator")
    common = [a for a in ARGS if not a.startswith(drop)] + ["--no_tuner"]
    module = os.path.join(PENGUIN_DIR, "penguin_module.py")
    common += [f"--module_file={module}"]
    roots = [
        [str(tmp_path / "data_only"), ["--no_trainer"]],
        [str(tmp_path / "training"), []],
    ]
    warmed = forked_launch.run_code(
        _WARMS, json.dumps(common), json.dumps(roots), log_dir=str(tmp_path / "logs")
    )
    assert warmed == [[0, False], [0, True]]


def test_another_module_file_of_the_same_folder_trains_its_own_model(tmp_path):
    """Two module files side by side share the folder's archive of Python files: a run with
    the second must not reuse the Tuner and Trainer of a run with the first (it did: every
    stage cached, the first module's model served as the second's)."""
    folder = tmp_path / "project"
    folder.mkdir()
    with open(os.path.join(PENGUIN_DIR, "penguin_module.py")) as f:
        code = f.read()
    (folder / "first.py").write_text(code)
    (folder / "second.py").write_text(code + "\n# another module, same preprocessing_fn\n")
    root = str(tmp_path / "root")
    args = [a for a in ARGS if not a.startswith("--tuner")] + ["--no_tuner"]
    args += [f"--pipeline_root={root}"]
    first = forked_cli([*args, f"--module_file={folder / 'first.py'}"])
    assert first.returncode == 0, first.stderr[-4000:]
    second = forked_cli([*args, f"--module_file={folder / 'second.py'}"])
    assert second.returncode == 0, second.stderr[-4000:]
    statuses = _statuses(root)
    # Transform's key holds preprocessing_fn's code, the same in both: reused.
    assert (statuses["Transform"], statuses["Trainer"]) == ("cached", "ok"), statuses


def test_a_stage_rerun_under_no_cache_runs_the_stages_that_read_its_outputs_again(tmp_path):
    """--no_cache=InfraValidator makes a new verdict under the same key: the Pusher that
    reads it must not be reused (it was: a model the rerun's serving check failed was
    reported pushed on the strength of the earlier verdict). The Evaluator, which reads
    nothing the InfraValidator makes, is still reused."""
    root = str(tmp_path / "root")
    args = [a for a in ARGS if not a.startswith(("--tuner", "--no_evaluator", "--no_infra"))]
    args += ["--no_tuner", f"--pipeline_root={root}", f"--push_destination={tmp_path / 'push'}"]
    args += [f"--module_file={os.path.join(PENGUIN_DIR, 'penguin_module.py')}"]
    first = forked_cli(args)
    assert first.returncode == 0, first.stderr[-4000:]
    # Two training steps: the Evaluator does not bless it, and the Pusher (it ran) says so.
    assert _statuses(root)["Pusher"] == "skipped"
    again = forked_cli([*args, "--no_cache=InfraValidator"])
    assert again.returncode == 0, again.stderr[-4000:]
    statuses = _statuses(root)
    # The Pusher ran again ("skipped": it decided again), not "cached".
    assert (statuses["Evaluator"], statuses["InfraValidator"], statuses["Pusher"]) == (
        "cached",
        "ok",
        "skipped",
    ), statuses
