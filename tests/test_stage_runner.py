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
from beam_pipeline.engine.artifacts import Anomalies, Model, Schema, Statistics
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
    ctx = StageContext(PipelineConfig(), None, run_dir, manifest.identity, None, None)
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
    ctx = StageContext(PipelineConfig(), None, run_dir, manifest.identity, None, None)
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
    assert list(statuses) == ["Schema", "Validation"] and graph[2].runs == 0
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
