"""The user's code misbehaving, through the CLI: an exit call or a crash in ``run_fn``, in
the hypermodel's ``build`` or in a trial's ``fit``, and code that runs past
``--trainer_timeout`` or ``--trial_timeout``, each end the stage with one sentence (the
summary written, the stage failed in the store), or stop the one trial and go on.

(tests/test_user_code_staging.py: what is staged and where its files go.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from conftest import PENGUIN_DIR, forked_cli

from beam_pipeline.core.errors import EXIT_USER_ERROR

PENGUIN_MODULE = os.path.join(PENGUIN_DIR, "penguin_module.py")
# A user's module file needs its data named (only the bundled module has a default).
PENGUIN_DATA = [f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}", "--csv_null_values=,NA"]


def _cli(args, env=None, timeout=600) -> subprocess.CompletedProcess:
    """``python -m beam_pipeline ARGS`` in a process of its own, as a user runs it (a fork
    of the warm fork server: an exit the user's code makes in the launcher ends that
    process, not the test's)."""
    return forked_cli(args, env=env, timeout=timeout)


# The bundled module with hostile behaviour chosen by $HOSTILE (read in every process that
# imports it: the launcher, the Trainer's and the oracle's processes, the trial workers).
_HOSTILE_CODE = """

import time as _time

_HOSTILE = os.environ.get("HOSTILE", "")
_MARKER = os.environ.get("HOSTILE_MARKER", "")
_penguin_build_model = _build_model
_penguin_run_fn = run_fn
_penguin_tuner_fn = tuner_fn


def _build_model(hparams, tf_transform_output):  # noqa: F811
    if _HOSTILE == "build_exit":
        os._exit(1)
    return _penguin_build_model(hparams, tf_transform_output)


def run_fn(fn_args):  # noqa: F811
    if _HOSTILE.startswith("run_fn_exit_"):
        os._exit(int(_HOSTILE.rsplit("_", 1)[1]))
    while _HOSTILE == "run_fn_hang":
        _time.sleep(0.2)
    return _penguin_run_fn(fn_args)


class _Hostile(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if _HOSTILE == "fit_exit":
            os._exit(1)
        # fit_hang: every trial hangs; first_trial_hangs: the first one only.
        first = _HOSTILE == "first_trial_hangs" and not os.path.exists(_MARKER)
        if first:
            open(_MARKER, "w").close()
        while _HOSTILE == "fit_hang" or first:
            _time.sleep(0.2)


def tuner_fn(fn_args):  # noqa: F811
    result = _penguin_tuner_fn(fn_args)
    fit_kwargs = dict(result.fit_kwargs)
    fit_kwargs["callbacks"] = [*fit_kwargs.get("callbacks", []), _Hostile()]
    return TunerFnResult(tuner=result.tuner, fit_kwargs=fit_kwargs)
"""

_SMALL = [
    "--tuner_max_trials=2",
    "--tuner_parallel_trials=1",
    "--tuner_train_steps=2",
    "--tuner_eval_steps=1",
    "--train_steps=2",
    "--eval_steps=1",
    "--no_evaluator",
    # The runs share a root (the data stages are reused) and differ only in $HOSTILE,
    # which no cache key sees: the model stages must run each time.
    "--no_cache=Tuner,Trainer",
]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """(the hostile module file, a pipeline root shared by the runs: data stages cached)."""
    folder = tmp_path_factory.mktemp("hostile")
    module = folder / "hostile_module.py"
    with open(PENGUIN_MODULE) as f:
        module.write_text(f.read() + _HOSTILE_CODE)
    return str(module), str(folder / "root")


def _hostile_run(hostile, tmp_path, behaviour, *flags):
    module, root = hostile
    run_id = f"{behaviour}-{os.getpid()}-{len(os.listdir(tmp_path))}"
    env = dict(os.environ, HOSTILE=behaviour, HOSTILE_MARKER=str(tmp_path / "marker"))
    args = [f"--module_file={module}", *PENGUIN_DATA, f"--pipeline_root={root}"]
    args.append(f"--run_id={run_id}")
    proc = _cli([*args, *_SMALL, *flags], env=env)
    return proc, os.path.join(root, "runs", run_id)


def _execution_status(root: str, run_dir: str, stage: str) -> str:
    """The metadata store's status of ``stage``'s execution in the run (`runs show`)."""
    from beam_pipeline.metadata import open_for_pipeline

    with open_for_pipeline(root, existing=True) as store:
        found = store.run_executions(os.path.basename(run_dir)) or []
    return ",".join(sorted(e.status.value for e in found if e.stage == stage))


def _assert_failed_run(proc, run_dir, root, stage, sentence):
    """Exit 2 with one error sentence, the summary written, the stage failed in the store."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == EXIT_USER_ERROR, proc.stderr[-3000:] + proc.stdout[-2000:]
    assert len(errors) == 1 and sentence in errors[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert os.path.exists(os.path.join(run_dir, "summary.json"))
    assert _execution_status(root, run_dir, stage) == "failed"


@pytest.mark.slow
@pytest.mark.parametrize("code", [0, 3])
def test_an_exit_in_run_fn_fails_the_trainer_with_one_sentence(hostile, tmp_path, code):
    # os._exit in run_fn used to end the launcher itself (on the DirectRunner run_fn ran
    # there): exit code 0 (a "successful" run with no summary, the Trainer left running in
    # the store) or 3 (the code of blocking anomalies).
    proc, run_dir = _hostile_run(hostile, tmp_path, f"run_fn_exit_{code}", "--no_tuner")
    sentence = (
        f"run_fn in {hostile[0]} ended its process with exit code {code} (an os._exit or "
        "sys.exit call, or a crash) before it returned"
    )
    _assert_failed_run(proc, run_dir, hostile[1], "Trainer", sentence)


@pytest.mark.slow
def test_an_exit_in_the_hypermodels_build_fails_the_tuner_with_one_sentence(hostile, tmp_path):
    # keras-tuner builds the model in tuner_fn (to learn the search space); it ran in the
    # launcher, which an os._exit(1) there ended without a word.
    proc, run_dir = _hostile_run(hostile, tmp_path, "build_exit")
    sentence = (
        f"tuner_fn in {hostile[0]} (or its hypermodel's build) ended its process with exit code 1"
    )
    _assert_failed_run(proc, run_dir, hostile[1], "Tuner", sentence)


@pytest.mark.slow
def test_an_exit_in_a_trials_fit_names_the_trial_and_the_exit_code(hostile, tmp_path):
    # It used to say the trial "probably runs out of memory", under 267 lines of gRPC
    # tracebacks.
    proc, run_dir = _hostile_run(hostile, tmp_path, "fit_exit")
    sentence = "ended its worker process with exit code 1"
    _assert_failed_run(proc, run_dir, hostile[1], "Tuner", sentence)
    # The trial, by its Keras Tuner id (a number), and how often its worker ended.
    (error,) = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    named = r"error: Tuner trial \d+ ended its worker process with exit code 1 \d+ times \("
    assert re.match(named, error), error
    assert "out of memory" not in proc.stderr and "RpcError" not in proc.stderr


@pytest.mark.slow
def test_a_trial_past_trial_timeout_is_stopped_and_the_search_goes_on(hostile, tmp_path):
    # The first trial's callback loops forever; it is stopped, recorded as timed out,
    # and the second trial completes: the search publishes its best hyperparameters.
    # The limit is far above what the second trial takes and what the first takes to
    # reach its first batch (a few seconds each, tuner_fn included, on a loaded machine):
    # only the hanging trial can reach it.
    proc, run_dir = _hostile_run(
        hostile, tmp_path, "first_trial_hangs", "--trial_timeout=30", "--no_trainer"
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    assert (tmp_path / "marker").exists()  # the hanging trial did start
    with open(os.path.join(run_dir, "tuner", "trials.json")) as f:
        trials = json.load(f)
    trials = trials["trials"] if isinstance(trials, dict) else trials
    statuses = sorted((t["status"], (t.get("error") or "")[:41]) for t in trials)
    assert statuses == [
        ("COMPLETED", ""),
        ("FAILED", "TimeoutError: ran past --trial_timeout=30"),
    ], statuses


@pytest.mark.slow
def test_a_search_whose_trials_all_time_out_stops_with_one_sentence(hostile, tmp_path):
    # Every trial hangs, so any limit is reached: a short one keeps the test short.
    proc, run_dir = _hostile_run(hostile, tmp_path, "fit_hang", "--trial_timeout=5")
    sentence = (
        "tuning trials ran past --trial_timeout=5 s and were stopped; raise --trial_timeout, "
        "or make the trials shorter (--tuner_train_steps)."
    )
    _assert_failed_run(proc, run_dir, hostile[1], "Tuner", sentence)


@pytest.mark.slow
def test_a_run_fn_past_trainer_timeout_fails_the_trainer_with_one_sentence(hostile, tmp_path):
    # run_fn hangs, so any limit is reached: a short one keeps the test short.
    proc, run_dir = _hostile_run(
        hostile, tmp_path, "run_fn_hang", "--no_tuner", "--trainer_timeout=10"
    )
    sentence = (
        f"run_fn in {hostile[0]} ran past --trainer_timeout=10 s and was stopped; raise "
        "--trainer_timeout, or make it do less (fewer steps)."
    )
    _assert_failed_run(proc, run_dir, hostile[1], "Trainer", sentence)


def test_eval_labels_the_train_split_lacks_are_named_not_a_tensorflow_error(tmp_path, capsys):
    """Three rows: the eval split's one species is not among the train split's, so the
    vocabulary tf.Transform builds from the train split maps it to -1, which Keras's loss
    refuses. (In this process: the Trainer runs in its own either way.)"""
    from beam_pipeline import cli

    with open(os.path.join(PENGUIN_DIR, "penguins.csv")) as f:
        lines = f.read().splitlines()
    data = tmp_path / "three.csv"
    data.write_text("\n".join([lines[0], lines[1], lines[159], lines[299]]) + "\n")
    code = cli.main([
        f"--data={data}", "--csv_null_values=,NA", f"--module_file={PENGUIN_MODULE}",
        "--ignore_anomalies",  # the eval split's sex value is new too
        "--no_tuner", "--no_infra_validator", "--train_steps=2", "--no_progress",
        f"--pipeline_root={tmp_path / 'root'}", "--run_id=three",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert code == EXIT_USER_ERROR, err[-3000:]
    (line,) = err.strip().splitlines()
    assert re.fullmatch(
        re.escape(f"error: run_fn in {PENGUIN_MODULE}:")
        + r"\d+"
        + re.escape(
            " was given label -1, outside the model's 2 classes (TensorFlow: Received a label "
            "value of -1 which is outside the valid range of [0, 2)): the eval split holds a "
            "label value that no train row has, which the vocabulary tf.Transform builds from "
            "the train split maps to -1; give the train split rows of every label value (more "
            "rows: a data set this small splits unevenly) or drop the rare label's rows."
        ),
        line,
    ), line


def _runs_until_stopped(folder: str, *, doing) -> None:
    """User code that never returns; on SIGTERM it notes that it got one, then ends."""
    import signal
    import time

    def noted(signum, frame):
        with open(os.path.join(folder, "terminated"), "w") as f:
            f.write("SIGTERM")
        os._exit(0)

    signal.signal(signal.SIGTERM, noted)
    with open(os.path.join(folder, "started"), "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.05)


def _returns_once_told(folder: str, *, doing) -> str:
    import time

    with open(os.path.join(folder, "started.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(folder, "started.tmp"), os.path.join(folder, "started"))
    while not os.path.exists(os.path.join(folder, "go")):
        time.sleep(0.02)
    return "done"


def test_ctrl_c_to_the_process_group_is_left_to_the_caller_not_raised_in_user_code(tmp_path):
    """A terminal's Ctrl-C reaches every process of its group: run_fn got it first and its
    KeyboardInterrupt came back as the Trainer's "unexpected error" (exit 2, "report it as
    a bug") instead of an interrupted run (exit 130). The user-code process ignores it; the
    caller, interrupted too, stops that process (the test above)."""
    import signal

    from trainer.isolation import run_isolated

    sent = []

    def interrupt_the_child_then_let_it_return():
        started = tmp_path / "started"
        if started.exists() and not sent:
            os.kill(int(started.read_text()), signal.SIGINT)
            sent.append(True)
            (tmp_path / "go").write_text("")
        return None

    try:
        value = run_isolated(
            _returns_once_told,
            (str(tmp_path),),
            what="run_fn in m.py",
            abort=interrupt_the_child_then_let_it_return,
        )
    except KeyboardInterrupt:  # not pytest's own: the user code's, sent back
        pytest.fail("the user-code process raised the group's Ctrl-C back to its caller")
    assert sent and value == "done"


def test_a_caller_that_stops_sends_its_user_code_process_sigterm_at_once(tmp_path):
    """The launcher stopped alone (SIGTERM or Ctrl-C to its process only, as a container
    runtime sends it) while user code runs in its process: that process gets SIGTERM at
    once, not 30 s of waiting and then SIGKILL (which a 30 s grace period cuts short)."""
    from trainer.isolation import run_isolated

    def stop_once_started():
        if (tmp_path / "started").exists():
            raise KeyboardInterrupt  # as the runner raises it in the stage's thread
        return None

    with pytest.raises(KeyboardInterrupt):
        run_isolated(
            _runs_until_stopped, (str(tmp_path),), what="run_fn in m.py", abort=stop_once_started
        )
    assert (tmp_path / "terminated").read_text() == "SIGTERM"


class _Interrupted:
    """A DoFn's process that gets the Ctrl-C (the launcher's main thread runs in-memory
    Beam steps, a Trainer's among them)."""

    def process(self, element):
        raise KeyboardInterrupt


def test_a_ctrl_c_that_beam_re_raised_wrapped_is_an_interrupt_not_a_stages_error():
    # Beam's DoFn invoker re-raises a KeyboardInterrupt without arguments as a RuntimeError
    # ("KeyboardInterrupt [while running 'X']"): the runner reported a Ctrl-C during the
    # Trainer as its unexpected error (exit 2, "report it as a bug"), not an interrupt.
    import apache_beam as beam

    from beam_pipeline.engine.failures import is_interrupt

    fn = type("InterruptedFn", (_Interrupted, beam.DoFn), {})
    raised = None
    try:
        with beam.Pipeline(runner="DirectRunner", argv=["--direct_running_mode=in_memory"]) as p:
            _ = p | beam.Create([1]) | "Step" >> beam.ParDo(fn())
    except Exception as e:  # noqa: BLE001 - what Beam makes of it; a bare one fails below
        raised = e
    assert raised is not None and not isinstance(raised, KeyboardInterrupt), raised
    assert is_interrupt(raised)
