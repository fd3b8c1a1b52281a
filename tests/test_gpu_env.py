"""GPU hygiene: every process a run starts has GPU memory growth on before TensorFlow starts,
and ``--gpus_per_trial`` gives each tuner worker process GPUs of its own.

Tested through the CLI on CPU: what is tested is the environment each process gets, as
each Python process the run starts records it itself when its interpreter starts (the run
uses an interpreter whose ``sitecustomize`` writes the record: no poll can miss a short-lived
process), and from inside the module's code (what TensorFlow in a trial or training process
sees).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

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


def _record(kind, folder):
    from tensorflow.python.eager import context

    record = {k: _os.environ.get(k) for k in _NAMES}
    # Whether this process's TensorFlow was kept off the GPUs. On a host without GPUs the
    # public get_visible_devices("GPU") is empty either way; what tf.config.
    # set_visible_devices([], "GPU") leaves is a device list of the CPU alone, set before
    # TensorFlow initialized its devices (an initialized one lists every device it found).
    ctx = context.context()
    record["devices"] = {
        "visible": [d.device_type for d in ctx._visible_device_list],
        "initialized": ctx._context_handle is not None,
    }
    with open(_os.path.join(folder, f"{kind}-{_os.getpid()}.json"), "w") as f:
        _json.dump(record, f)


def tuner_fn(fn_args):
    _record("tuner_fn", fn_args.custom_config["env_dir"])
    return _tuner_fn(fn_args)


def run_fn(fn_args):
    _record("run_fn", fn_args.custom_config["env_dir"])
    return _run_fn(fn_args)
"""


# The sitecustomize of the run's interpreter: each Python process records, as it starts,
# its command line and the environment it was started with (os.environ before any code of
# its own ran), in a file named by its pid. Forks (the fork server's trial workers) run no
# interpreter start: they record what they see from the module's code (_RECORDER).
_SITECUSTOMIZE = """
import json, os, sys

_folder = os.environ.get("BP_TEST_PROCESS_RECORDS")
if _folder:
    with open(os.path.join(_folder, f"{os.getpid()}.json"), "w") as _f:
        _env = {k: os.environ.get(k) for k in ("TF_FORCE_GPU_ALLOW_GROWTH", "CUDA_VISIBLE_DEVICES")}
        json.dump({"cmdline": " ".join(sys.orig_argv), "env": _env, "ppid": os.getppid()}, _f)
"""


def _recording_python(folder) -> str:
    """A virtual environment's python that sees this one's packages and runs
    _SITECUSTOMIZE at every start (also one started as ``python -I``):
    the run's processes start ``sys.executable``, so all of them are this one."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    (site,) = (folder / "lib").glob("python*/site-packages")
    # addsitedir, not a plain path line: it reads the .pth files there too (the editable
    # install of this project).
    packages = sysconfig.get_paths()["purelib"]
    (site / "parent_env.pth").write_text(f"import site; site.addsitedir({packages!r})\n")
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return str(folder / "bin" / "python")


def _kind(cmdline: str) -> str:
    if "multiprocessing.forkserver" in cmdline:
        return "fork server"
    if "sdk_worker_main" in cmdline:
        return "Beam SDK worker"
    if "multiprocessing" in cmdline:  # a fork of the server shows the server's command line
        return "fork server"
    return cmdline.split(" ", 1)[0]


@pytest.fixture(scope="module")
def watched_run(tmp_path_factory):
    """The bundled pipeline through the CLI in multi_processing mode, with four GPU ids
    visible and two per trial, each of its Python processes recording its environment.

    The stages that start processes of their own kinds run: the data stages' and the
    Transform's Beam jobs (SDK workers), the tuner's trial workers, the Trainer's process
    and the InfraValidator's sandbox (forks of the fork server). The Evaluator starts none
    of another kind (its Beam job's workers are the data stages' kind): it does not run."""
    tmp = tmp_path_factory.mktemp("gpu_env")
    module_dir = tmp / "module"
    shutil.copytree(PENGUIN_DIR, module_dir)
    module = module_dir / "penguin_module.py"
    module.write_text(module.read_text() + _RECORDER)
    env_dir = tmp / "env"
    env_dir.mkdir()
    processes = tmp / "processes"
    processes.mkdir()
    python = _recording_python(tmp / "venv")
    env = {k: v for k, v in os.environ.items() if k not in (ALLOW_GROWTH, VISIBLE_DEVICES)}
    env.update(
        {
            VISIBLE_DEVICES: "0,1,2,3",
            "PYTHONPATH": REPO,
            "BP_TEST_PROCESS_RECORDS": str(processes),
        }
    )
    cmd = [
        python,
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
        # The progress display's thread runs (gated): the launcher still forks its fork
        # server from itself (test_the_launchers_fork_server_is_a_fork_of_the_launcher...).
        f"--custom_config={json.dumps({'env_dir': str(env_dir)})}",
    ]
    launcher = subprocess.run(
        cmd,
        cwd=tmp,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
    )
    assert launcher.returncode == 0, launcher.stdout[-4000:]
    started = {}  # pid: (command line, environment), the launcher's own left out
    for path in processes.iterdir():
        record = json.loads(path.read_text())
        started[int(path.stem)] = (record["cmdline"], record["env"], record["ppid"])
    (launcher_pid,) = [pid for pid, (c, *_) in started.items() if "-m beam_pipeline" in c]
    # The test started the launcher without it.
    assert started.pop(launcher_pid)[1][ALLOW_GROWTH] is None
    records = {p.name: json.loads(p.read_text()) for p in env_dir.iterdir()}
    log = (tmp / "root" / "runs" / "gpu_env" / "run.log").read_text()
    return started, records, launcher_pid, log


def test_every_process_the_run_starts_has_gpu_memory_growth_in_its_environment(watched_run):
    started, *_ = watched_run
    kinds = {}
    for cmdline, env, _ in started.values():
        kinds.setdefault(_kind(cmdline), []).append(env.get(ALLOW_GROWTH))
    # The launcher set it in its own environment before it imported TensorFlow, and each
    # process it started got it from there (the test started the launcher without it).
    # No fresh interpreter but Beam's SDK workers: the InfraValidator's sandbox is a fork of
    # the fork server too (its forks record nothing here: they start no interpreter).
    assert set(kinds) <= {"fork server", "Beam SDK worker"}, kinds
    assert {k: set(v) for k, v in kinds.items()} == {k: {"true"} for k in kinds}


def test_the_launchers_fork_server_is_a_fork_of_the_launcher_not_a_fresh_interpreter(
    watched_run,
):
    # The launcher imports the ML stack once and forks its fork server from itself: no
    # fresh ``multiprocessing.forkserver`` interpreter (seconds of imports again) is its
    # child. (A Beam SDK worker that starts user code has threads, so it cannot fork
    # itself: its own fork server is still a fresh interpreter.)
    started, _, launcher_pid, _ = watched_run
    fresh_servers = [
        (pid, parent)
        for pid, (cmdline, _, parent) in started.items()
        if "multiprocessing.forkserver" in cmdline
    ]
    assert not [pid for pid, parent in fresh_servers if parent == launcher_pid], fresh_servers


def test_each_trial_worker_sees_its_own_gpus_and_the_trainer_sees_all(watched_run):
    _, records, *_ = watched_run
    trials = [r for name, r in records.items() if name.startswith("tuner_fn-")]
    training = [r for name, r in records.items() if name.startswith("run_fn-")]
    # The oracle's tuner_fn (its own process) sees the run's four ids; the two trial
    # worker processes two each, no id twice.
    assert sorted(r[VISIBLE_DEVICES] for r in trials) == ["0,1", "0,1,2,3", "2,3"]
    assert [r[VISIBLE_DEVICES] for r in training] == ["0,1,2,3"]
    assert {r[ALLOW_GROWTH] for r in trials + training} == {"true"}


def test_a_launcher_whose_stages_all_run_in_workers_hides_its_gpus(watched_run):
    """multi_processing: every stage runs in worker processes, so the launcher's own
    TensorFlow (tf.Transform traces preprocessing_fn there) is kept off the GPUs. On a host
    without GPUs this is not observable from the launcher's TensorFlow (it initializes its
    CPU either way): the log line is what is left to check here (benchmarks/gpu_check.sh
    runs on a GPU)."""
    *_, log = watched_run
    assert "GPUs hidden from this process: the run's stages run in worker processes." in log


def test_the_tuners_oracle_process_hides_its_gpus(watched_run):
    """The oracle's process runs tuner_fn and the hypermodel's build (to learn the search
    space) and trains nothing: its TensorFlow is kept off the GPUs before it starts. (Its
    tuner_fn is the one that sees all four ids: the trial workers see two each.)"""
    _, records, _, _ = watched_run
    (oracle,) = [
        r
        for name, r in records.items()
        if name.startswith("tuner_fn-") and r[VISIBLE_DEVICES] == "0,1,2,3"
    ]
    assert oracle["devices"] == {"visible": ["CPU"], "initialized": False}


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


def test_more_gpus_per_trial_than_the_host_has_stops_the_run_before_it_writes(
    tmp_path, capsys, monkeypatch
):
    # The CLI's entry point in this process: the check reads the environment the run was
    # started with, not a fresh interpreter's start.
    from beam_pipeline import cli

    monkeypatch.setenv(VISIBLE_DEVICES, "0,1,2")
    root = tmp_path / "root"
    capsys.readouterr()
    code = cli.main(
        [
            f"--pipeline_root={root}",
            "--tuner_parallel_trials=2",
            "--gpus_per_trial=2",
            "--direct_running_mode=multi_processing",
            "--direct_num_workers=2",
            "--no_progress",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert (
        "--gpus_per_trial=2 with 2 trial worker processes needs 4 GPUs, but this host has 3 "
        "(CUDA_VISIBLE_DEVICES=0,1,2); pass --tuner_parallel_trials=1 or a smaller "
        "--gpus_per_trial." in err
    )
    assert not root.exists()


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


_STREAMS_REPLACED = """
import os, sys, tempfile
# As pytest's capture does: sys.stdout writes to a file of its own, on another descriptor.
sys.stdout = tempfile.TemporaryFile(mode="w+")
from beam_pipeline.core.forked import start_forked, warm_fork_server

warm_fork_server()  # one thread: the server is a fork of this process
code = (
    "import os, sys\\n"
    "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)\\n"
    "os.dup2(fd, 1)\\n"
    "from beam_pipeline.core import forked\\n"
    "warm = forked._server_warm.is_set(), forked._warm_up_started.is_set()\\n"
    "print('printed in the fork', *warm)\\n"
    "sys.stdout.flush()\\n"
)
sys.argv = ["-c", sys.argv[1]]
process = start_forked(exec, (code,))
process.join()
sys.__stderr__.write(f"exit {process.exitcode}\\n")
"""


def test_a_fork_prints_to_its_own_descriptors_whatever_its_launcher_did_to_sys_stdout(tmp_path):
    # A fork server forked from a process whose sys.stdout writes elsewhere (pytest's
    # capture, a notebook's) gave its forks that stream, on a descriptor the server had
    # closed: forked test launches printed nothing (their JSON lines, their one sentence).
    # And its forks knew of no server of their own yet took the launcher's "warm" flags
    # (a run in one then warmed nothing and said it had).
    out = tmp_path / "out.txt"
    done = subprocess.run(
        [sys.executable, "-c", _STREAMS_REPLACED, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert "exit 0" in done.stderr, done.stderr[-3000:]
    assert out.read_text() == "printed in the fork False False\n"
