"""The stage runner on small real stages (files on disk, the run's real manifest).

What every stage gets from the runner, checked once here instead of per stage: outputs
published only when the stage succeeds, staging discarded when it fails, a stage's own
failure rows and the outputs it asks to keep, a rerun's look-up (cached rows, a deleted
output is a miss, a changed parameter reruns it and everything after it), the records'
calls, and a halting stage. The records are the run's manifest alone (a resume);
tests/test_run_records.py runs the runner with the metadata store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from beam_pipeline.config import PipelineConfig
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import PUBLISHED_MARKER
from beam_pipeline.engine import (
    Input,
    Stage,
    StageContext,
    StageFailed,
    StageResult,
    run_stages,
)
from beam_pipeline.engine.artifacts import (
    Anomalies,
    InfraBlessing,
    Model,
    ModelBlessing,
    PushedModel,
    Schema,
    Statistics,
)
from beam_pipeline.engine.manifest import RunManifest
from beam_pipeline.engine.summary import RunSummary, StageReport, StageStatus


class _Write(Stage):
    """Writes ``text`` into each of its outputs (after reading its inputs' files)."""

    def __init__(self, name, inputs, outputs, text="x", fail=None, halt=False, keep=False):
        self.name, self.inputs, self.outputs = name, inputs, outputs
        self.text, self.fail, self.halt, self.keeps_outputs_on_rerun = text, fail, halt, keep
        self.runs = 0

    def parameters(self, ctx):
        return {"text": self.text}

    def run(self, ctx, inputs, out):
        self.runs += 1
        read = "".join(open(os.path.join(a.uri, "f")).read() for a in inputs.values())
        for artifact in self.outputs:
            with open(os.path.join(out.folder(artifact), "f"), "w") as f:
                f.write(read + self.text)
        report = StageReport(self.name, StageStatus.OK, note=self.text)
        if self.fail == "raise":
            raise PipelineError("bad input; fix it.")
        if self.fail == "stage_failed":
            report.status = StageStatus.FAILED
            raise StageFailed(PipelineError("bad rows; fix them."), [report], publish=(Anomalies,))
        if self.halt:
            return StageResult([report], halt=True)
        return StageResult([report], outputs=[out.artifact(a) for a in self.outputs])


class _Calls:
    """The run's manifest, with the runner's calls to the records listed."""

    def __init__(self, manifest):
        self.manifest, self.calls = manifest, []

    def lookup(self, stage, key):
        return self.manifest.lookup(stage, key)

    def forget(self, stages):
        self.calls.append(("forget", tuple(stages)))
        self.manifest.forget(stages)

    def begin(self, stage, key, built_from, inputs):
        self.calls.append(("begin", stage))

    def record(self, execution):
        self.calls.append(("record", execution.stage))
        self.manifest.record(execution)

    def stop(self, stage, error, reports=()):
        self.calls.append(("stop", stage, type(error).__name__))

    def reuse(self, execution):
        self.calls.append(("reuse", execution.stage))


def _graph(**kwargs):
    first = _Write("Schema", (), (Schema,), text=kwargs.get("first", "a"))
    second = _Write(
        "Validation",
        (Input(Schema, key="schema"),),
        (Anomalies, Statistics),
        fail=kwargs.get("fail"),
        halt=kwargs.get("halt", False),
    )
    third = _Write("Trainer", (Input(Anomalies, key="anomalies"),), (Model,), keep=True)
    return [first, second] if kwargs.get("two") else [first, second, third]


def _run(root, graph, **kwargs):
    run_dir, manifest = RunManifest.open(root, "r1", {"identity": 1})
    ctx = StageContext(PipelineConfig(), None, run_dir, manifest.identity)
    records, summary = _Calls(manifest), RunSummary(run_dir.root)
    try:
        run_stages(graph, ctx, records, summary)
    finally:
        run_dir.remove_staging()
    return run_dir, records.calls, {r.stage: r.status for r in summary.stages}


def test_outputs_are_published_and_a_rerun_reuses_them(tmp_path):
    root = str(tmp_path)
    graph = _graph(two=True)
    run_dir, calls, statuses = _run(root, graph)
    assert statuses == {"Schema": StageStatus.OK, "Validation": StageStatus.OK}
    assert open(run_dir.path(Anomalies.FOLDER, "f")).read() == "ax"  # read its input
    assert all(
        os.path.exists(run_dir.path(a.FOLDER, PUBLISHED_MARKER))
        for a in (Schema, Anomalies, Statistics)
    )
    assert [c[0] for c in calls] == ["forget", "begin", "record", "forget", "begin", "record"]

    _, calls, statuses = _run(root, graph)
    assert statuses == {"Schema": StageStatus.CACHED, "Validation": StageStatus.CACHED}
    assert calls == [("reuse", "Schema"), ("reuse", "Validation")]
    assert [s.runs for s in graph] == [1, 1]


def test_a_deleted_output_or_a_changed_parameter_reruns_from_there(tmp_path):
    root = str(tmp_path)
    run_dir, _, _ = _run(root, _graph())
    os.remove(run_dir.path(Model.FOLDER, PUBLISHED_MARKER))  # unpublished: a miss
    _, calls, statuses = _run(root, _graph())
    assert list(statuses.values()) == [StageStatus.CACHED, StageStatus.CACHED, StageStatus.OK]
    assert ("forget", ("Trainer",)) in calls

    # A changed parameter upstream changes every later key: all three rerun.
    _, _, statuses = _run(root, _graph(first="b"))
    assert set(statuses.values()) == {StageStatus.OK}
    assert open(run_dir.path(Model.FOLDER, "f")).read() == "bxx"


def test_a_stage_kept_outputs_survive_its_own_rerun_only(tmp_path):
    root = str(tmp_path)
    run_dir, _, _ = _run(root, _graph())
    marker = run_dir.path(Model.FOLDER, "checkpoint")
    open(marker, "w").close()
    manifest = RunManifest.open(root, "r1", {"identity": 1})[1]
    manifest.forget(["Trainer"])  # as if the trainer had not finished
    # Its own folder stays for it (a trainer resumes from its checkpoints) ...
    graph = _graph()
    graph[2].publishes_itself = True  # writes in place, as the Trainer does
    graph[2].run = lambda ctx, inputs, out: StageResult(
        [StageReport("Trainer", StageStatus.OK, note=str(os.path.exists(marker)))]
    )
    _run(root, graph)
    assert os.path.exists(marker)
    # ... but an earlier stage's rerun removes it.
    _run(root, _graph(first="c"))
    assert not os.path.exists(marker)


@pytest.mark.parametrize("fail", ["raise", "stage_failed"])
def test_a_failed_stage_publishes_nothing_but_what_it_asks_for(tmp_path, fail):
    with pytest.raises(PipelineError, match="fix"):
        _run(str(tmp_path), _graph(fail=fail))
    run_dir, manifest = RunManifest.open(str(tmp_path), "r1", {"identity": 1})
    published = {
        a.FOLDER.value: run_dir.is_published(a.FOLDER) for a in (Schema, Anomalies, Statistics)
    }
    assert published == {"schema": True, "anomalies": fail == "stage_failed", "statistics": False}
    assert not os.path.exists(os.path.join(run_dir.root, ".staging"))
    assert list(manifest.stages) == ["Schema"]  # the failed stage is not recorded


def test_a_failed_stage_is_reported_and_told_to_the_records(tmp_path):
    root = str(tmp_path)
    run_dir, manifest = RunManifest.open(root, "r1", {"identity": 1})
    ctx = StageContext(PipelineConfig(), None, run_dir, manifest.identity)
    records, summary = _Calls(manifest), RunSummary(run_dir.root)
    with pytest.raises(PipelineError, match="bad rows"):
        run_stages(_graph(fail="stage_failed"), ctx, records, summary)
    assert [(r.stage, r.status) for r in summary.stages] == [
        ("Schema", StageStatus.OK),
        ("Validation", StageStatus.FAILED),
    ]
    assert records.calls[-1] == ("stop", "Validation", "PipelineError")


def test_a_halting_stage_stops_the_run_unrecorded(tmp_path):
    graph = _graph(halt=True)
    run_dir, calls, statuses = _run(str(tmp_path), graph)
    # The stage after it does not run, and its row says why.
    assert list(statuses) == ["Schema", "Validation", "Trainer"] and graph[2].runs == 0
    assert statuses["Trainer"] is StageStatus.SKIPPED
    assert calls[-1] == ("stop", "Validation", "NoneType")
    assert not run_dir.is_published(Anomalies.FOLDER)


def test_a_record_of_an_earlier_version_is_a_miss(tmp_path):
    root = str(tmp_path)
    graph = _graph(two=True)
    _run(root, graph)
    run_dir, manifest = RunManifest.open(root, "r1", {"identity": 1})
    for record in manifest.stages.values():  # as written before artifacts were typed
        del record["outputs"], record["inputs"]
    manifest.forget([])  # rewrites manifest.json
    _, _, statuses = _run(root, graph)
    assert set(statuses.values()) == {StageStatus.OK} and [s.runs for s in graph] == [2, 2]


# Stages that do not read each other's outputs run at the same time (issue 33).


class _Sibling(_Write):
    """A _Write that calls ``during(ctx)`` in its run, before it writes."""

    def __init__(self, name, inputs, outputs, during, **kwargs):
        super().__init__(name, inputs, outputs, **kwargs)
        self.during = during

    def run(self, ctx, inputs, out):
        self.during(ctx)
        return super().run(ctx, inputs, out)


def _siblings(first, second, **kwargs):
    """Schema -> (Evaluator, InfraValidator: both read the schema only) -> Pusher (reads
    both); ``first`` and ``second`` are the siblings' ``during``."""
    return [
        _Write("Schema", (), (Schema,), text=kwargs.get("text", "a")),
        _Sibling(
            "Evaluator",
            (Input(Schema, key="schema"),),
            (ModelBlessing,),
            first,
            text=kwargs.get("eval_text", "x"),
            fail=kwargs.get("fail"),
        ),
        _Sibling(
            "InfraValidator",
            (Input(Schema, key="schema"),),
            (InfraBlessing,),
            second,
            text=kwargs.get("infra_text", "x"),
        ),
        _Write(
            "Pusher",
            (Input(ModelBlessing, key="blessing"), Input(InfraBlessing, key="infra")),
            (PushedModel,),
        ),
    ]


def test_independent_stages_run_at_once_and_their_rows_keep_graph_order(tmp_path):
    # Each sibling waits for the other to be running: one after the other, the first
    # would wait in vain (BrokenBarrierError after the timeout).
    both = threading.Barrier(2, timeout=60)
    infra_ended = threading.Event()
    ended = []

    def evaluator(ctx):
        both.wait()
        assert infra_ended.wait(60)  # the later sibling ends first

    def infra(ctx):
        both.wait()

    def finished(row):
        ended.append(row.stage)
        if row.stage == "InfraValidator":
            # Once the runner has taken its end (not merely once its work returned, which
            # is before its end reaches the runner): the Evaluator's end comes after it.
            infra_ended.set()

    graph = _siblings(evaluator, infra)
    run_dir, manifest = RunManifest.open(str(tmp_path), "r1", {"identity": 1})
    manifest.order = [s.name for s in graph]  # as beam_pipeline.pipeline sets it
    ctx = StageContext(PipelineConfig(), None, run_dir, manifest.identity)
    ctx.events.subscribe(stage_finished=finished)
    records, summary = _Calls(manifest), RunSummary(run_dir.root)
    run_stages(graph, ctx, records, summary)
    order = ["Schema", "Evaluator", "InfraValidator", "Pusher"]
    assert [r.stage for r in summary.stages] == order  # graph order in the summary ...
    assert ended == ["Schema", "InfraValidator", "Evaluator", "Pusher"]  # ... as they ended
    assert list(RunManifest.open(str(tmp_path), "r1", {"identity": 1})[1].stages) == order
    # Both begun before either ended; the Pusher read what both made.
    begins = [c for c in records.calls if c[0] in ("begin", "record")]
    assert begins[2:5] == [
        ("begin", "Evaluator"),
        ("begin", "InfraValidator"),
        ("record", "InfraValidator"),
    ]
    assert open(run_dir.path(PushedModel.FOLDER, "f")).read() == "axaxx"


def test_a_failed_stage_lets_its_running_sibling_finish_and_the_first_failure_is_raised(
    tmp_path,
):
    evaluator_failed = threading.Event()
    both = threading.Barrier(2, timeout=60)

    def evaluator(ctx):
        both.wait()

    def infra(ctx):
        both.wait()
        assert evaluator_failed.wait(60)  # still running when its sibling failed

    graph = _siblings(evaluator, infra, fail="raise")
    graph[1].run = _failing_then(graph[1].run, evaluator_failed.set)
    run_dir, manifest = RunManifest.open(str(tmp_path), "r1", {"identity": 1})
    ctx = StageContext(PipelineConfig(), None, run_dir, manifest.identity)
    records, summary = _Calls(manifest), RunSummary(run_dir.root)
    with pytest.raises(PipelineError, match="bad input"):
        run_stages(graph, ctx, records, summary)
    # The sibling finished, was published and recorded; nothing after them started.
    assert ("record", "InfraValidator") in records.calls
    assert ("stop", "Evaluator", "PipelineError") in records.calls
    assert run_dir.is_published(InfraBlessing.FOLDER)
    assert graph[3].runs == 0
    assert [(r.stage, r.status) for r in summary.stages] == [
        ("Schema", StageStatus.OK),
        ("Evaluator", StageStatus.FAILED),
        ("InfraValidator", StageStatus.OK),
    ]

    # Both fail, the later one in graph order first (the Evaluator fails once the runner
    # has taken the InfraValidator's failure): the earlier one's error is raised.
    infra_failed = threading.Event()

    def infra_fails(ctx):
        raise PipelineError("the sandbox failed; fix it.")

    graph = _siblings(lambda ctx: infra_failed.wait(60), infra_fails, fail="raise")
    run_dir, manifest = RunManifest.open(str(tmp_path / "both"), "r1", {"identity": 1})
    ctx = StageContext(PipelineConfig(), None, run_dir, manifest.identity)
    ctx.events.subscribe(
        stage_finished=lambda row: row.stage == "InfraValidator" and infra_failed.set()
    )
    records, summary = _Calls(manifest), RunSummary(run_dir.root)
    with pytest.raises(PipelineError, match="bad input"):
        run_stages(graph, ctx, records, summary)
    stops = [call for call in records.calls if call[0] == "stop"]
    assert stops == [
        ("stop", "InfraValidator", "PipelineError"),
        ("stop", "Evaluator", "PipelineError"),
    ]


def _failing_then(run, after):
    def wrapped(ctx, inputs, out):
        try:
            return run(ctx, inputs, out)
        finally:
            after()

    return wrapped


def test_a_rerun_forgets_the_stages_that_depend_on_it_not_its_sibling(tmp_path):
    root = str(tmp_path)
    _run(root, _siblings(lambda ctx: None, lambda ctx: None))
    # The Evaluator reruns (a changed parameter): the Pusher, which reads it, reruns; the
    # InfraValidator after it in graph order, which does not, is kept.
    graph = _siblings(lambda ctx: None, lambda ctx: None, eval_text="y")
    _, calls, statuses = _run(root, graph)
    assert statuses == {
        "Schema": StageStatus.CACHED,
        "Evaluator": StageStatus.OK,
        "InfraValidator": StageStatus.CACHED,
        "Pusher": StageStatus.OK,
    }
    assert ("forget", ("Evaluator", "Pusher")) in calls
    assert [s.runs for s in graph] == [0, 1, 0, 1]


def test_a_stage_gets_its_own_beam_options_and_the_others_the_runs(tmp_path):
    from beam_pipeline.runtime.options import parse_beam_args

    seen = {}

    def evaluator(ctx):
        seen["Evaluator"] = ctx.options

    def infra(ctx):
        seen["InfraValidator"] = ctx.options

    run_options = parse_beam_args(["--runner=DirectRunner"])
    own = parse_beam_args(["--runner=DirectRunner", "--direct_num_workers=2"])
    run_dir, manifest = RunManifest.open(str(tmp_path), "r1", {"identity": 1})
    ctx = StageContext(PipelineConfig(), run_options, run_dir, manifest.identity)
    graph = _siblings(evaluator, infra)
    run_stages(
        graph,
        ctx,
        _Calls(manifest),
        RunSummary(run_dir.root),
        {"InfraValidator": own},
    )
    assert seen == {"Evaluator": run_options, "InfraValidator": own}


def test_ctrl_c_stops_the_stages_running_at_once_and_records_them(tmp_path):
    both = threading.Barrier(2, timeout=60)

    def evaluator(ctx):
        both.wait()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        while True:  # until the KeyboardInterrupt reaches this thread too
            time.sleep(0.01)

    def infra(ctx):
        both.wait()
        while True:
            time.sleep(0.01)

    run_dir = _interrupted_siblings(tmp_path, evaluator, infra)
    assert not os.path.exists(os.path.join(run_dir.root, ".staging", "model_blessing"))


def test_a_stage_that_turns_ctrl_c_into_its_own_error_or_ends_after_it_is_recorded_interrupted(
    tmp_path,
):
    # TensorFlow turns a KeyboardInterrupt raised inside one of its calls into an error of
    # its own, which a stage may translate into a sentence of its own ("the model does not
    # load"); a stage's code may also catch it and end normally. Either way the stage was
    # interrupted: that is what its record and its summary row say.
    both = threading.Barrier(2, timeout=60)

    def evaluator(ctx):
        both.wait()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        try:
            while True:
                time.sleep(0.01)
        except KeyboardInterrupt:
            raise PipelineError("The model in /m does not load (KeyboardInterrupt).") from None

    def infra(ctx):
        both.wait()
        try:
            while True:
                time.sleep(0.01)
        except KeyboardInterrupt:
            return {}  # ends as if nothing happened

    _interrupted_siblings(tmp_path, evaluator, infra)


def test_ctrl_c_waits_for_a_stage_inside_an_import_and_leaves_the_import_lock_free(tmp_path):
    # A stage thread waiting for the interpreter's import lock when Ctrl-C comes (another
    # thread is importing): raised there, the KeyboardInterrupt would land right after the
    # thread gets the lock, before importlib's ``try``, and the lock would stay held by a
    # thread that has ended; every later import in the process would wait for ever. Run
    # in a process of its own: that is a process this test must be able to leave hung.
    (tmp_path / "bp_fresh_module.py").write_text("")
    (tmp_path / "bp_later_module.py").write_text("")
    try:
        child = subprocess.run(
            [sys.executable, "-c", _STAGE_IMPORTING_AT_CTRL_C, os.path.dirname(__file__)]
            + [str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired as hung:
        pytest.fail(f"the process hung after the Ctrl-C (an import waits for ever): {hung}")
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.split() == ["import-lock-held:", "False", "imported"], child.stdout


_STAGE_IMPORTING_AT_CTRL_C = """
import _imp, importlib, os, pathlib, signal, sys, threading, time
sys.path[:0] = sys.argv[1:]
import test_stage_runner

def stack(name):  # the code names of thread ``name``'s frames, innermost first
    ident = next(t.ident for t in threading.enumerate() if t.name == name)
    frame, names = sys._current_frames().get(ident), []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names

both = threading.Barrier(2, timeout=60)

def evaluator(ctx):
    _imp.acquire_lock()  # as a thread importing holds it
    try:
        both.wait()
        while stack("bp-InfraValidator")[0] != "_get_module_lock":
            time.sleep(0.001)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        while True:  # until the main thread waits for the stages it has interrupted
            try:
                while not {"_interrupt", "join"} <= set(stack("MainThread")):
                    time.sleep(0.01)
                break
            except KeyboardInterrupt:
                continue
    finally:
        _imp.release_lock()

def infra(ctx):
    both.wait()
    importlib.import_module("bp_fresh_module")  # waits for the import lock
    while True:
        time.sleep(0.01)

test_stage_runner._interrupted_siblings(pathlib.Path(sys.argv[2]), evaluator, infra)
print("import-lock-held:", _imp.lock_held(), flush=True)
import bp_later_module
print("imported", flush=True)
os._exit(0)
"""


def _interrupted_siblings(tmp_path, evaluator, infra):
    """Runs the siblings (``evaluator`` sends the Ctrl-C) and checks that both were
    recorded and shown as interrupted and that no stage thread is left; the run folder.

    Ctrl-C reaches the main thread only (a real SIGINT to it, as a terminal sends)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        graph = _siblings(evaluator, infra)
        run_dir, manifest = RunManifest.open(str(tmp_path), "r1", {"identity": 1})
        ctx = StageContext(PipelineConfig(), None, run_dir, manifest.identity)
        records, summary = _Calls(manifest), RunSummary(run_dir.root)
        with pytest.raises(KeyboardInterrupt):
            run_stages(graph, ctx, records, summary)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert records.calls[-2:] == [
        ("stop", "Evaluator", "KeyboardInterrupt"),
        ("stop", "InfraValidator", "KeyboardInterrupt"),
    ]
    assert [(r.stage, r.status, r.note) for r in summary.stages[1:]] == [
        ("Evaluator", StageStatus.FAILED, "interrupted"),
        ("InfraValidator", StageStatus.FAILED, "interrupted"),
    ]
    assert not any(t.name.startswith("bp-") for t in threading.enumerate())
    return run_dir
