"""GPU hygiene: every process a run starts has GPU memory growth on before TensorFlow starts,
and ``--gpus_per_trial`` gives each tuner worker process GPUs of its own.

Tested through the CLI on CPU: what is tested is the environment each process gets, read
from ``/proc/PID/environ`` (what the process was started with) while the run goes, and
from inside the module's code (what TensorFlow in a trial or training process sees).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import PENGUIN_DIR, REPO

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.gpus import (
    ALLOW_GROWTH,
    VISIBLE_DEVICES,
    check_gpus_per_trial,
    gpu_environment,
    host_gpus,
    worker_gpus,
)

pytestmark = pytest.mark.slow

# Appended to a copy of the bundled module: its tuner_fn (in the launcher, for the oracle,
# and in every trial worker) and its run_fn (the training process) record what they see.
_RECORDER = """

import json as _json
import os as _os

_tuner_fn, _run_fn = tuner_fn, run_fn
_NAMES = ("TF_FORCE_GPU_ALLOW_GROWTH", "CUDA_VISIBLE_DEVICES")


def _record(kind, fn_args):
    folder = fn_args.custom_config["env_dir"]
    with open(_os.path.join(folder, f"{kind}-{_os.getpid()}.json"), "w") as f:
        _json.dump({k: _os.environ.get(k) for k in _NAMES}, f)


def tuner_fn(fn_args):
    _record("tuner_fn", fn_args)
    return _tuner_fn(fn_args)


def run_fn(fn_args):
    _record("run_fn", fn_args)
    return _run_fn(fn_args)
"""


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _descendants(root: int, parents: dict[int, int]) -> list[int]:
    """The processes under ``root``; ``parents`` (pid: its parent) is kept between calls,
    so that each call reads the parent of new processes only (every process's, every
    50 ms, would cost the test more CPU than some of the processes it watches)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            pid = int(name)
            if pid not in parents:
                try:
                    parents[pid] = _ppid(pid)
                except (OSError, IndexError, ValueError):  # gone meanwhile
                    continue
            children.setdefault(parents[pid], []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _read_process(pid: int):
    """(command line, environment) of ``pid`` as it was started; None once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        with open(f"/proc/{pid}/environ", "rb") as f:
            pairs = [p.split(b"=", 1) for p in f.read().split(b"\0") if b"=" in p]
    except OSError:
        return None
    return cmdline, {k.decode(): v.decode(errors="replace") for k, v in pairs}


def _kind(cmdline: str) -> str:
    if "multiprocessing.forkserver" in cmdline:
        return "fork server"
    if "infra_validator/sandbox.py" in cmdline:
        return "InfraValidator sandbox"
    if "sdk_worker_main" in cmdline:
        return "Beam SDK worker"
    if "multiprocessing" in cmdline:  # a fork of the server shows the server's command line
        return "fork server"
    return cmdline.split(" ", 1)[0]


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory):
    """The bundled pipeline through the CLI in multi_processing mode, with four GPU ids
    visible and two per trial, its processes' environments read every 50 ms while it runs.

    The stages that start processes of their own kinds run: the data stages' and the
    Transform's Beam jobs (SDK workers), the tuner's trial workers (forks of the fork
    server), the Trainer and the InfraValidator's sandbox. The Evaluator starts none of
    another kind (its Beam job's workers are the data stages' kind): it does not run."""
    tmp = tmp_path_factory.mktemp("gpu_env")
    module_dir = tmp / "module"
    shutil.copytree(PENGUIN_DIR, module_dir)
    module = module_dir / "penguin_module.py"
    module.write_text(module.read_text() + _RECORDER)
    env_dir = tmp / "env"
    env_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in (ALLOW_GROWTH, VISIBLE_DEVICES)}
    env.update({VISIBLE_DEVICES: "0,1,2,3", "PYTHONPATH": REPO})
    cmd = [
        sys.executable,
        "-m",
        "beam_pipeline",
        f"--data={module_dir / 'penguins.csv'}",
        "--csv_null_values=,NA",
        f"--module_file={module}",
        f"--pipeline_root={tmp / 'root'}",
        "--run_id=gpu_env",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=2",
        "--tuner_parallel_trials=2",
        "--gpus_per_trial=2",
        "--tuner_max_trials=2",
        "--tuner_train_steps=3",
        "--tuner_eval_steps=1",
        "--train_steps=3",
        "--eval_steps=1",
        "--no_evaluator",
        "--no_progress",
        f"--custom_config={json.dumps({'env_dir': str(env_dir)})}",
    ]
    launcher = subprocess.Popen(
        cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seen: dict[int, tuple[str, dict]] = {}
    parents: dict[int, int] = {}
    deadline = time.time() + 900
    own = _read_process(launcher.pid)
    while launcher.poll() is None and time.time() < deadline:
        for pid in _descendants(launcher.pid, parents):
            if pid not in seen:
                read = _read_process(pid)
                # A child with the launcher's own command line is a fork that has not
                # exec'd yet: /proc shows the launcher's starting environment, not its
                # own; it is read again once it has.
                if read is not None and (own is None or read[0] != own[0]):
                    seen[pid] = read
        time.sleep(0.05)
    if launcher.poll() is None:
        launcher.kill()
    output = launcher.communicate()[0]
    assert launcher.returncode == 0, output[-4000:]
    records = {p.name: json.loads(p.read_text()) for p in env_dir.iterdir()}
    return seen, records, (tmp / "root" / "runs" / "gpu_env" / "run.log").read_text()


def test_every_process_the_run_starts_has_gpu_memory_growth_in_its_environment(watched_run):
    seen, _, _ = watched_run
    kinds = {}
    for cmdline, env in seen.values():
        kinds.setdefault(_kind(cmdline), []).append(env.get(ALLOW_GROWTH))
    # The launcher set it in its own environment before it imported TensorFlow, and each
    # process it started got it from there (the test started the launcher without it).
    assert {"fork server", "InfraValidator sandbox"} <= set(kinds), sorted(kinds)
    assert {k: set(v) for k, v in kinds.items()} == {k: {"true"} for k in kinds}


def test_each_trial_worker_sees_its_own_gpus_and_the_trainer_sees_all(watched_run):
    _, records, _ = watched_run
    trials = [r for name, r in records.items() if name.startswith("tuner_fn-")]
    training = [r for name, r in records.items() if name.startswith("run_fn-")]
    # The launcher's own tuner_fn call (the oracle) sees the run's four ids; the two trial
    # worker processes two each, no id twice.
    assert sorted(r[VISIBLE_DEVICES] for r in trials) == ["0,1", "0,1,2,3", "2,3"]
    assert [r[VISIBLE_DEVICES] for r in training] == ["0,1,2,3"]
    assert {r[ALLOW_GROWTH] for r in trials + training} == {"true"}


def test_a_launcher_whose_stages_all_run_in_workers_hides_its_gpus(watched_run):
    """multi_processing: every stage runs in worker processes, so the launcher's own
    TensorFlow (the tuner's oracle builds the model) is kept off the GPUs (CPU here:
    the log line says it was done before TensorFlow started)."""
    _, _, log = watched_run
    assert "GPUs hidden from this process: the run's stages run in worker processes." in log


def test_the_launcher_sets_memory_growth_before_tensorflow_is_imported(tmp_path):
    """An audit hook in the launcher's interpreter reads the variable when TensorFlow's
    import starts (the module file imports it, then stops the run)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, runpy, sys\n"
        "seen = []\n"
        "def hook(event, args):\n"
        "    if event == 'import' and args[0] == 'tensorflow' and not seen:\n"
        f"        seen.append(os.environ.get({ALLOW_GROWTH!r}))\n"
        "sys.addaudithook(hook)\n"
        "sys.argv = ['beam_pipeline', *sys.argv[1:]]\n"
        "try:\n"
        "    runpy.run_module('beam_pipeline', run_name='__main__', alter_sys=True)\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('SEEN', seen)\n"
    )
    module = tmp_path / "m.py"
    module.write_text("import tensorflow as tf\n\nraise ValueError('stop the run here')\n")
    env = {k: v for k, v in os.environ.items() if k != ALLOW_GROWTH}
    env["PYTHONPATH"] = REPO
    done = subprocess.run(
        [
            sys.executable,
            str(probe),
            f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}",
            f"--module_file={module}",
            f"--pipeline_root={tmp_path / 'root'}",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert "SEEN ['true']" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


def test_more_gpus_per_trial_than_the_host_has_stops_the_run_before_it_writes(tmp_path):
    env = dict(os.environ, **{VISIBLE_DEVICES: "0,1,2", "PYTHONPATH": REPO})
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "beam_pipeline",
            f"--pipeline_root={tmp_path / 'root'}",
            "--tuner_parallel_trials=2",
            "--gpus_per_trial=2",
            "--direct_running_mode=multi_processing",
            "--direct_num_workers=2",
            "--no_progress",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert (
        "--gpus_per_trial=2 with 2 trial worker processes needs 4 GPUs, but this host has 3 "
        "(CUDA_VISIBLE_DEVICES=0,1,2); pass --tuner_parallel_trials=1 or a smaller "
        "--gpus_per_trial." in done.stderr
    )
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize(
    "env, gpus",
    [
        ({VISIBLE_DEVICES: "2,3,5"}, ("2", "3", "5")),
        ({VISIBLE_DEVICES: ""}, ()),
    ],
)
def test_host_gpus_are_the_visible_devices_the_user_gave(env, gpus):
    assert host_gpus(env) == gpus


@pytest.mark.parametrize(
    "index, per_trial, gpus, expected",
    [
        (0, 2, ("0", "1", "2", "3"), "0,1"),
        (1, 2, ("0", "1", "2", "3"), "2,3"),
        (1, 1, ("4", "6"), "6"),
        (1, 1, ("0",), None),  # one GPU: the trials share it
        (1, 0, ("0", "1"), None),  # not asked: every worker sees every GPU
    ],
)
def test_worker_gpus(index, per_trial, gpus, expected):
    assert worker_gpus(index, per_trial, gpus) == expected


def test_too_few_gpus_for_the_trial_workers_is_refused_with_the_fix():
    with pytest.raises(PipelineError, match=r"needs 6 GPUs.*--tuner_parallel_trials=2"):
        check_gpus_per_trial(2, 3, ("0", "1", "2", "3"))
    check_gpus_per_trial(2, 3, ("0",))  # one GPU: shared, nothing to refuse


def test_a_value_the_user_set_is_kept():
    assert gpu_environment({ALLOW_GROWTH: "false"}) == {ALLOW_GROWTH: "false"}
    assert gpu_environment({}) == {ALLOW_GROWTH: "true"}


@pytest.mark.parametrize(
    "mode",
    [
        [],  # the trials' default pool of worker processes on this host
        ["--direct_running_mode=in_memory"],  # the trials in the launching process
    ],
)
def test_gpus_per_trial_on_a_host_without_gpus_is_refused_before_anything_is_written(
    tmp_path, capsys, monkeypatch, mode
):
    from beam_pipeline import cli

    monkeypatch.setenv(VISIBLE_DEVICES, "")  # this host's GPUs: none
    root = tmp_path / "root"
    capsys.readouterr()
    assert cli.main([f"--pipeline_root={root}", "--gpus_per_trial=1", "--no_progress", *mode]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --gpus_per_trial=1 asks for GPUs for each trial, but the trials run on this "
        "host, which has none (CUDA_VISIBLE_DEVICES is empty); leave --gpus_per_trial out to "
        "tune on CPUs, or run the trials on a runner whose workers have GPUs."
    )
    assert not root.exists()
