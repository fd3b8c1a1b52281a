"""A run killed (SIGKILL) or interrupted (Ctrl-C) anywhere, then rerun, finishes.

Through the CLI on the bundled penguins. Each kill waits for a file that shows the stage
is under way (never a fixed sleep): tf.Transform writes its analyzer cache's ``MANIFEST``
when the Transform job is built, before the job writes the shards it names, so a kill
then is a kill in the middle of writing the cache entry.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import time

import pytest
from conftest import PENGUIN_DIR, REPO, launch_terminal_cli

from beam_pipeline import cli

_DATA_ARGS = [
    "--runner=DirectRunner",
    f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}",
    "--csv_null_values=,NA",
    f"--module_file={os.path.join(PENGUIN_DIR, 'penguin_module.py')}",
    "--no_tuner",
]


def _summary(root: str, run_id: str) -> dict:
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        return {s["stage"]: s for s in json.load(f)["stages"]}


def _cache_manifest_written(root: str):
    """True once tf.Transform wrote an analyzer cache MANIFEST (hidden folders too)."""

    def ready() -> bool:
        for _, _, files in os.walk(os.path.join(root, "cache", "transform")):
            if "MANIFEST" in files:
                return True
        return False

    return ready


def _signal_group_when(proc, ready, sig, what: str) -> None:
    deadline = time.time() + 600
    while not ready():
        assert proc.poll() is None, f"ended before {what}: {proc.stderr}"
        assert time.time() < deadline, f"no {what} within 600 s"
        time.sleep(0.01)
    os.killpg(proc.pid, sig)
    proc.wait(120)


def _kill_cli_when(args, log_dir, ready, what: str) -> None:
    """``python -m beam_pipeline ARGS`` forked (tests/forked_launch.py), SIGKILLed with its
    whole process group as soon as ``ready()``."""
    import forked_launch

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = forked_launch.launch_cli(args, REPO, env, log_dir)
    _signal_group_when(proc, ready, signal.SIGKILL, what)


@pytest.fixture(scope="module")
def killed_in_cache(tmp_path_factory):
    """A pipeline root whose run ``killed`` (data stages and Transform) was SIGKILLed while
    tf.Transform wrote its analyzer cache entry, then resumed with the same command:
    (root, the data stages' arguments)."""
    tmp = tmp_path_factory.mktemp("killed_in_cache")
    root = str(tmp / "root")
    args = [*_DATA_ARGS, "--no_trainer", f"--pipeline_root={root}"]
    _kill_cli_when(
        [*args, "--run_id=killed"], str(tmp / "logs"), _cache_manifest_written(root), "cache"
    )
    assert cli.main([*args, "--run_id=killed"]) == 0
    return root, args


def test_a_transform_killed_while_writing_its_analyzer_cache_breaks_no_later_run(
    killed_in_cache,
):
    root, args = killed_in_cache
    # The killed run resumed, then a new run on the same data: both finish (the new one
    # runs Transform again, not reusing the resumed run's, to read the analyzer cache).
    transform = _summary(root, "killed")["Transform"]
    assert transform["status"] == "ok"
    assert transform["details"]["analyzer_cache"].startswith("written to ")
    assert cli.main([*args, "--run_id=fresh", "--no_cache=Transform"]) == 0
    transform = _summary(root, "fresh")["Transform"]
    assert transform["status"] == "ok"
    assert transform["details"]["analyzer_cache"] == "reused (no analyzer recomputed)"
    # The killed job's private folder was removed: the published entry alone is left.
    entries = os.listdir(os.path.join(root, "cache", "transform"))
    assert len(entries) == 1 and entries[0].startswith("train-"), entries


def test_an_analyzer_cache_entry_left_half_written_is_removed_and_never_read(killed_in_cache):
    """An entry without its listing (what a killed older version left: a MANIFEST naming
    shards never written) is removed, and the analysis runs anew. (In the killed-and-resumed
    root above: its one published entry, made half-written here, whichever test ran first.)"""
    root, args = killed_in_cache
    (entry,) = glob.glob(os.path.join(root, "cache", "transform", "train-*"))
    for name in os.listdir(entry):
        if name != "MANIFEST":
            os.remove(os.path.join(entry, name))
    assert cli.main([*args, "--run_id=second", "--no_cache=Transform"]) == 0
    note = _summary(root, "second")["Transform"]["details"]["analyzer_cache"]
    assert note.startswith("written to ") and "a damaged entry removed: it was never" in note
    assert os.path.exists(os.path.join(entry, "_COMPLETE"))


def _sigint_cli(args, log_dir, ready, what: str) -> subprocess.CompletedProcess:
    """``python -m beam_pipeline ARGS`` as a terminal's Ctrl-C reaches it: SIGINT to its
    process group once ``ready()`` (forked, a session of its own: launch_terminal_cli)."""
    proc = launch_terminal_cli(*args, cwd=REPO, log_dir=log_dir)
    deadline = time.time() + 600
    while not ready():
        assert proc.poll() is None, f"ended before {what}: {proc.stderr[-3000:]}"
        assert time.time() < deadline, f"no {what} within 600 s"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(300)
    return subprocess.CompletedProcess(args, proc.returncode, proc.stdout, proc.stderr)


def test_ctrl_c_during_transform_says_the_run_was_interrupted_and_how_to_resume(tmp_path):
    root = str(tmp_path / "root")
    args = [*_DATA_ARGS, "--no_trainer", f"--pipeline_root={root}", "--run_id=stopped"]
    logs = str(tmp_path / "logs")
    proc = _sigint_cli(args, logs, _cache_manifest_written(root), "the Transform job")
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "error: the run was interrupted during Transform; what its finished stages published "
        "is kept: run the same command with --run_id=stopped to resume it."
    ]
    assert "KeyboardInterrupt" not in proc.stdout + proc.stderr
    assert os.listdir(os.path.join(root, "cache", "transform")) == []
    # The resume finishes, keeping what the interrupted attempt had published.
    assert cli.main(args) == 0
    statuses = {s: r["status"] for s, r in _summary(root, "stopped").items()}
    assert statuses["ExampleGen"] == "cached" and statuses["Transform"] == "ok"


def test_a_run_killed_during_the_evaluator_finishes_when_rerun(tmp_path):
    root = str(tmp_path / "root")
    args = [*_DATA_ARGS, "--train_steps=20", "--no_infra_validator", f"--pipeline_root={root}"]
    run = os.path.join(root, "runs", "killed")

    def evaluating() -> bool:
        return bool(glob.glob(os.path.join(run, ".staging", "evaluation-*")))

    _kill_cli_when([*args, "--run_id=killed"], str(tmp_path / "logs"), evaluating, "Evaluator")
    assert not os.path.exists(os.path.join(run, "evaluation", "_PUBLISHED"))
    assert cli.main([*args, "--run_id=fresh"]) == 0
    assert cli.main([*args, "--run_id=killed"]) == 0
    assert _summary(root, "fresh")["Evaluator"]["status"] == "ok"
    # The resume kept its own Trainer and reused the new run's evaluation (same inputs).
    statuses = {s: r["status"] for s, r in _summary(root, "killed").items()}
    assert statuses["Trainer"] == "cached" and statuses["Evaluator"] == "cached"


def _span_work_begun(root: str):
    """True once ExampleGen opened its private folder for the spans it reads."""
    return lambda: bool(glob.glob(os.path.join(root, "cache", "spans", ".partial-*")))


def _write_spans(folder, copies: int = 1) -> str:
    """Two spans of the bundled penguins (each row ``copies`` times); returns their
    ``{SPAN}`` pattern."""
    with open(os.path.join(PENGUIN_DIR, "penguins.csv")) as f:
        lines = f.read().splitlines()
    for span, rows in ((1, lines[1:150] * copies), (2, lines[150:] * copies)):
        os.makedirs(folder / f"span-{span}")
        (folder / f"span-{span}" / "data.csv").write_text("\n".join([lines[0], *rows]) + "\n")
    return str(folder / "span-{SPAN}" / "data.csv")


@pytest.mark.parametrize(
    ("sig", "code", "stage", "during"),
    [
        (signal.SIGTERM, 143, "Transform", "Transform"),  # `timeout`, Kubernetes, a scheduler
        # The terminal or ssh session closed, in a span's ExampleGen.
        (signal.SIGHUP, 129, "ExampleGen", "ExampleGen+Statistics"),
    ],
)
def test_sigterm_and_sighup_stop_a_run_as_ctrl_c_does(tmp_path, sig, code, stage, during):
    """The signal to the launcher alone (not its group, as `timeout` sends it): one
    sentence naming the stage and the run id that resumes, the store's record ended as
    interrupted, no staging folder and no private cache folder left."""
    import forked_launch

    from beam_pipeline.metadata.records import RunStatus
    from beam_pipeline.metadata.store import MetadataStore

    root = str(tmp_path / "root")
    if stage == "Transform":
        args = [*_DATA_ARGS, "--no_trainer"]
        ready = _cache_manifest_written(root)
    else:  # a span's ExampleGen: each span read into a private cache folder first
        # Enough rows that ExampleGen is still reading when the signal comes: a run of the
        # bundled rows alone could end (Transform halts it: no module file) before the
        # signal is sent, when this process is slow to see the folder appear.
        data = _write_spans(tmp_path / "spans", copies=100)
        args = ["--runner=DirectRunner", f"--data={data}", "--csv_null_values=,NA"]
        args = [*args, "--span_window=2"]
        ready = _span_work_begun(root)
    args = [*args, f"--pipeline_root={root}", "--run_id=stopped"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = forked_launch.launch_cli(args, REPO, env, str(tmp_path / "logs"))
    deadline = time.time() + 600
    while not ready():
        assert proc.poll() is None, f"ended before {stage}: {proc.stderr[-3000:]}"
        assert time.time() < deadline, f"no {stage} within 600 s"
        time.sleep(0.01)
    os.kill(proc.pid, sig)
    assert proc.wait(300) == code, proc.stderr[-3000:]
    name = signal.Signals(sig).name
    assert proc.stderr.strip().splitlines() == [
        f"error: the run was stopped by {name} during {during}; what its finished stages "
        "published is kept: run the same command with --run_id=stopped to resume it."
    ]
    run = os.path.join(root, "runs", "stopped")
    assert glob.glob(os.path.join(run, ".staging", "*")) == []
    assert glob.glob(os.path.join(root, "cache", "*", ".partial-*")) == []
    row = _summary(root, "stopped")[stage]
    assert (row["status"], row["note"]) == ("failed", "interrupted")
    with MetadataStore.for_pipeline_root(root) as store:
        assert {r.run_id: r.status for r in store.list_runs()} == {"stopped": RunStatus.INTERRUPTED}


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_handled_inside_a_weakref_callback_still_stops_the_run(sig):
    """Python runs the handler between any two instructions, a weakref callback's included
    (SQLAlchemy's run whenever the collector runs), where the KeyboardInterrupt it raises is
    dropped: the run must be stopped all the same, not finish and exit 0."""
    import threading
    import weakref

    class Collected:
        pass

    received: list[int] = []
    obj = Collected()
    ref = weakref.ref(obj, lambda _: signal.raise_signal(sig))  # handled in the callback
    # Ctrl-C as a terminal gives it (a shell's background job, CI's too, ignores SIGINT:
    # the CLI then leaves it ignored).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with cli._stop_signals_interrupt(received):
                del obj
                threading.Event().wait(60)  # the signal sent again interrupts this wait
    finally:
        signal.signal(signal.SIGINT, before)
    assert ref() is None
    assert received == ([] if sig == signal.SIGINT else [sig])
