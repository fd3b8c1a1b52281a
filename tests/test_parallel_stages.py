"""Stages that do not depend on each other run at the same time, and per-stage Beam flags
(issue 33), through the CLI's entry point (``cli.main``, what ``python -m beam_pipeline``
runs) on the bundled example (small steps, no tuning) in the test's process: what is tested
is the run, not a fresh interpreter's start. The run stopped by Ctrl-C is a process of its
own, forked from the warm fork server (tests/forked_launch.py).

The Evaluator and the InfraValidator both read only what the Trainer and ExampleGen made:
they run at once (the store's execution times overlap), while the summary, ``runs show``
and the manifest keep graph order. A failing Evaluator lets the InfraValidator beside it
finish and be recorded, and a Ctrl-C while both run stops both and records them.
``--stage_beam_args=Trainer:...`` reaches the Trainer's options only; a stage name that is
none of the graph's, or a flag that is no Beam option, is refused before anything is
written. The runner's rules on small stages are in
tests/test_stage_runner.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import launch_terminal_cli

from beam_pipeline.metadata import ExecutionStatus, MetadataStore
from beam_pipeline.stages.graph import STAGE_GRAPH

pytestmark = pytest.mark.slow

SMALL = ["--runner=DirectRunner", "--train_steps=20", "--eval_steps=5", "--no_tuner"]
# The summary's rows in graph order (the first stage gives two).
GRAPH_ORDER = ["ExampleGen", "Statistics", *(s.name for s in STAGE_GRAPH[1:])]


def _cli(*args: str, cwd, jobs=None) -> subprocess.CompletedProcess:
    """``python -m beam_pipeline ARGS`` in ``cwd``: the CLI's entry point in this process
    (what is read is the run's records, summary and output, not a fresh interpreter's;
    its Trainer and Beam workers run in processes of their own either way), or ``runs``
    commands (light) in a fresh process. With ``jobs``: each Beam job the run starts is
    appended to that file, its top-level steps and the options it ran with (those not at
    their defaults), read from the pipeline object as its run() starts."""
    if args[0] == "runs":
        return subprocess.run(
            [sys.executable, "-m", "beam_pipeline", *args],
            cwd=str(cwd),
            capture_output=True,
            text=True,
            timeout=900,
        )
    import apache_beam as beam

    from beam_pipeline import cli

    beam_run = beam.Pipeline.run

    def recording_run(self, *a, **kw):
        steps = [t.full_label for t in self.transforms_stack[0].parts]
        options = self.options.get_all_options(drop_default=True)
        with open(jobs, "a") as f:
            f.write(json.dumps({"steps": steps, "options": options}, default=str) + "\n")
        return beam_run(self, *a, **kw)

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)  # the default pipeline root: ./pipeline_runs
        if jobs:
            patch.setattr(beam.Pipeline, "run", recording_run)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(args))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _executions(root: str, run_id: str) -> dict:
    with MetadataStore.for_pipeline_root(str(root)) as store:
        return {e.stage: e for e in store.run_executions(run_id)}


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """The bundled run, the Trainer with a Beam flag of its own: (its folder, the process);
    its Beam jobs are recorded in jobs.jsonl there."""
    cwd = tmp_path_factory.mktemp("parallel")
    proc = _cli(
        *SMALL,
        "--run_id=first",
        "--stage_beam_args=Trainer:--direct_num_workers=2",
        cwd=cwd,
        jobs=cwd / "jobs.jsonl",
    )
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-4000:]
    return cwd, proc


def test_the_evaluator_and_the_infra_validator_run_at_once_in_graph_order(bundled):
    cwd, proc = bundled
    root = str(cwd / "pipeline_runs")
    executions = _executions(root, "first")
    evaluator, infra = executions["Evaluator"], executions["InfraValidator"]
    assert evaluator.status is infra.status is ExecutionStatus.COMPLETE
    # Each began before the other ended (one after the other, the InfraValidator would
    # begin after the Evaluator's end).
    assert infra.start_time < evaluator.end_time and evaluator.start_time < infra.end_time
    # The Pusher waited for both.
    assert executions["Pusher"].start_time >= max(evaluator.end_time, infra.end_time)
    # Both were shown running before either ended.
    progress = [line for line in proc.stdout.splitlines() if line.startswith("> ")]
    started = [progress.index(f"> {s}: running") for s in ("Evaluator", "InfraValidator")]
    ends = [
        i
        for i, line in enumerate(progress)
        if line.startswith(("> Evaluator: ", "> InfraValidator: ")) and "running" not in line
    ]
    assert len(ends) == 2 and max(started) < min(ends)
    # The summary and the manifest keep graph order; `runs show` lists every stage's
    # execution as it began (a stage after the Evaluator begins after the InfraValidator).
    with open(cwd / "pipeline_runs" / "runs" / "first" / "summary.json") as f:
        assert [s["stage"] for s in json.load(f)["stages"]] == GRAPH_ORDER
    with open(cwd / "pipeline_runs" / "runs" / "first" / "manifest.json") as f:
        assert list(json.load(f)["stages"]) == ["ExampleGen+Statistics", *GRAPH_ORDER[2:]]
    shown = _cli("runs", "show", "first", "--json", cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    stages = [e["stage"] for e in json.loads(shown.stdout)["executions"]]
    assert sorted(stages) == sorted(["ExampleGen+Statistics", *GRAPH_ORDER[2:]])


def test_a_stage_beam_flag_reaches_that_stage_only(bundled):
    cwd, _ = bundled
    with open(cwd / "jobs.jsonl") as f:
        jobs = [json.loads(line) for line in f]
    # The Trainer's job ran with the flag and the run's own options; every other stage's
    # job (the data stages, Transform, the Evaluator) without it.
    (trainer,) = [job["options"] for job in jobs if "TrainModel" in job["steps"]]
    assert trainer["direct_num_workers"] == 2 and trainer["runner"] == "DirectRunner"
    others = [job["options"] for job in jobs if "TrainModel" not in job["steps"]]
    assert len(others) >= 3, jobs
    assert all(o["runner"] == "DirectRunner" and "direct_num_workers" not in o for o in others)
    # Part of the run's identity.
    with open(cwd / "pipeline_runs" / "runs" / "first" / "manifest.json") as f:
        identity = json.load(f)["identity"]
    assert identity["stage_beam_args"] == {"Trainer": ["--direct_num_workers=2"]}


def test_a_failing_evaluator_lets_the_infra_validator_beside_it_finish(bundled, tmp_path):
    cwd, _ = bundled
    # Parses, but names no model: the Evaluator fails once the model is read, while the
    # InfraValidator (not reused: --no_cache) serves the model in its sandbox.
    config = tmp_path / "eval_config.pbtxt"
    config.write_text("slicing_specs {}\n")
    proc = _cli(
        *SMALL,
        "--run_id=failing",
        "--stage_beam_args=Trainer:--direct_num_workers=2",
        f"--eval_config={config}",
        "--no_cache=InfraValidator",
        cwd=cwd,
    )
    assert proc.returncode != 0
    assert "has no model_specs" in proc.stdout + proc.stderr
    executions = _executions(str(cwd / "pipeline_runs"), "failing")
    assert executions["Evaluator"].status is ExecutionStatus.FAILED
    assert executions["InfraValidator"].status is ExecutionStatus.COMPLETE
    assert "Pusher" not in executions
    with open(cwd / "pipeline_runs" / "runs" / "failing" / "summary.json") as f:
        rows = {s["stage"]: s["status"] for s in json.load(f)["stages"]}
    assert (rows["Evaluator"], rows["InfraValidator"]) == ("failed", "ok")


@pytest.mark.parametrize(
    "flag, message",
    [
        ("Trainr:--direct_num_workers=2", "names stage 'Trainr'"),
        ("Trainer:--direct_num_wrkers=2", "--direct_num_wrkers=2 is not a Beam pipeline option"),
    ],
)
def test_a_bad_stage_beam_flag_is_refused_before_anything_runs(tmp_path, flag, message):
    proc = _cli(*SMALL, f"--stage_beam_args={flag}", cwd=tmp_path)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert not os.path.exists(tmp_path / "pipeline_runs" / "runs")


def test_ctrl_c_while_both_run_stops_the_run_and_records_them(bundled):
    cwd, _ = bundled
    run = cwd / "pipeline_runs" / "runs" / "stopped"

    def both_running() -> bool:  # each one's staging folder exists while it runs
        staged = {p.name.split("-")[0] for p in (run / ".staging").glob("*")}
        return {"evaluation", "infra_blessing"} <= staged

    args = [*SMALL, "--run_id=stopped", "--no_cache=Evaluator,InfraValidator"]
    proc = launch_terminal_cli(*args, cwd=cwd, log_dir=cwd / "logs")
    deadline = time.time() + 600
    while not both_running():
        assert proc.poll() is None, proc.stderr[-3000:]
        assert time.time() < deadline
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
    try:
        proc.wait(300)
    except TimeoutError:
        os.kill(proc.pid, signal.SIGABRT)  # faulthandler prints every thread's stack
        with contextlib.suppress(TimeoutError):
            proc.wait(60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the run did not stop within 300 s of Ctrl-C:\n{proc.stderr[-6000:]}")
    stdout, stderr = proc.stdout, proc.stderr
    assert proc.returncode == 130, stderr[-3000:]
    assert stderr.startswith("error: the run was interrupted during "), stderr[-3000:]
    assert "Traceback" not in stdout + stderr
    executions = _executions(str(cwd / "pipeline_runs"), "stopped")
    # Each stopped where it was (or had just ended), recorded; nothing after them ran.
    for stage in ("Evaluator", "InfraValidator"):
        e = executions[stage]
        assert e.status is ExecutionStatus.COMPLETE or (
            e.status is ExecutionStatus.FAILED and e.error.startswith("KeyboardInterrupt")
        ), (stage, e.status, e.error)
    assert "Pusher" not in executions or executions["Pusher"].status is not ExecutionStatus.COMPLETE
    # The message names the stages it stopped.
    stopped = [s for s in ("Evaluator", "InfraValidator") if executions[s].error]
    assert stopped and stderr.strip() == (
        f"error: the run was interrupted during {' and '.join(stopped)}; what its finished "
        "stages published is kept: run the same command with --run_id=stopped to resume it."
    )
    assert not (run / ".staging").exists() or not list((run / ".staging").iterdir())
