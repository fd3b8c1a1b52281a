"""The stage runner with the metadata store (beam_pipeline.engine.run_records.RunRecords): every
execution recorded, caching across runs by cache key, --no_cache, failures (a killed run:
tests/test_resume.py's kill tests).

The graph here is two small stages of this file (one writes a number, the next doubles
it), run by the real runner in real run directories with a real manifest and a SQLite
store: what is tested is the recording and reuse, which does not depend on what a stage
computes (the whole pipeline twice is in tests/test_cli.py)."""

from __future__ import annotations

import os
import shutil

import pytest

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine import Input, Stage, StageContext, StageResult, run_stages
from beam_pipeline.engine.artifacts import Examples, Schema
from beam_pipeline.engine.manifest import RunManifest
from beam_pipeline.engine.run_records import DATA_TYPE, RunRecords
from beam_pipeline.engine.summary import RunSummary, StageReport, StageStatus
from beam_pipeline.metadata import ArtifactSpec, ExecutionStatus, MetadataStore


class MakeNumber(Stage):
    """Writes ``value`` (its parameter) into its Examples folder."""

    name = "ExampleGen+Statistics"
    outputs = (Examples,)

    def __init__(self, value: int):
        self.value, self.runs = value, 0

    def parameters(self, ctx):
        return {"value": self.value}

    def run(self, ctx, inputs, out):
        self.runs += 1
        with open(os.path.join(out.folder(Examples), "n.txt"), "w") as f:
            f.write(str(self.value))
        return StageResult([StageReport("Make", StageStatus.OK)], outputs=[out.artifact(Examples)])


class Double(Stage):
    """Writes twice the number it reads into its Schema folder (or fails)."""

    name = "Schema"
    inputs = (Input(Examples, key="examples"),)
    outputs = (Schema,)

    def __init__(self, fail: bool = False):
        self.fail, self.runs = fail, 0

    def run(self, ctx, inputs, out):
        self.runs += 1
        if self.fail:
            raise ValueError("no number to double")
        with open(os.path.join(inputs[Examples].uri, "n.txt")) as f:
            number = int(f.read())
        with open(os.path.join(out.folder(Schema), "n.txt"), "w") as f:
            f.write(str(2 * number))
        report = StageReport("Double", StageStatus.OK, note=f"doubled {number}")
        return StageResult([report], outputs=[out.artifact(Schema, doubled=2 * number)])


def _run(root: str, run_id: str, graph, no_cache=()) -> RunSummary:
    """One run of ``graph`` as pipeline.run does it, its records in the store."""
    run_dir, manifest = RunManifest.open(root, run_id, {"data": "d"})
    with MetadataStore.for_pipeline_root(root) as store:
        run = store.start_run(run_id)
        data = ArtifactSpec("/data/numbers.csv", DATA_TYPE, fingerprint="d")
        records = RunRecords(manifest, store, run, data, no_cache, data_stage=MakeNumber.name)
        ctx = StageContext(None, None, run_dir, {})
        summary = RunSummary(run_dir.root)
        run_stages(graph, ctx, records, summary)
        return summary


def _executions(root: str, run_id: str):
    with MetadataStore.for_pipeline_root(root) as store:
        return store.run_executions(run_id)


def _statuses(summary: RunSummary) -> list[tuple[str, StageStatus]]:
    return [(r.stage, r.status) for r in summary.stages]


def test_a_second_run_reuses_every_stage_and_records_where_from(tmp_path):
    root = str(tmp_path)
    make, double = MakeNumber(21), Double()
    _run(root, "r1", (make, double))
    first = _executions(root, "r1")
    assert [(e.stage, e.status) for e in first] == [
        ("ExampleGen+Statistics", ExecutionStatus.COMPLETE),
        ("Schema", ExecutionStatus.COMPLETE),
    ]
    assert first[0].inputs["data"].fingerprint == "d"
    assert first[1].inputs["Examples"] == first[0].outputs["Examples"]
    schema = first[1].outputs["Schema"].properties
    # Its files as published (beam_pipeline.engine.contents), which a reuse checks first.
    assert schema == {"doubled": 42, "files": {"n.txt": [2, schema["files"]["n.txt"][1]]}}
    assert first[1].outputs["Schema"].uri == os.path.join(root, "runs", "r1", "schema")

    summary = _run(root, "r2", (make, double))
    assert (make.runs, double.runs) == (1, 1)  # nothing ran again
    assert _statuses(summary) == [("Make", StageStatus.CACHED), ("Double", StageStatus.CACHED)]
    assert summary.stages[1].note == "reused from run r1; doubled 21"
    second = _executions(root, "r2")
    assert [(e.status, e.cached_from) for e in second] == [
        (ExecutionStatus.CACHED, first[0].id),
        (ExecutionStatus.CACHED, first[1].id),
    ]
    assert second[1].outputs == first[1].outputs  # r1's folders, nothing copied
    assert not os.path.exists(os.path.join(root, "runs", "r2", "schema"))

    # A resume of r2 keeps what r2 reused (its manifest recorded it).
    resumed = _run(root, "r2", (make, double))
    assert (make.runs, double.runs) == (1, 1)
    assert resumed.stages[0].note.startswith("kept from an earlier attempt of run r2")


def test_no_cache_changed_parameters_and_deleted_outputs_run_again(tmp_path):
    root = str(tmp_path)
    make, double = MakeNumber(21), Double()
    _run(root, "r1", (make, double))

    _run(root, "r2", (make, double), no_cache=("Schema",))
    assert (make.runs, double.runs) == (1, 2)  # only the named stage ran

    other = MakeNumber(5)
    summary = _run(root, "r3", (other, double))  # another parameter: both run
    assert (other.runs, double.runs) == (1, 3)
    assert summary.stages[1].note == "doubled 5"

    shutil.rmtree(os.path.join(root, "runs", "r1", "examples"))  # r1's output deleted
    _run(root, "r4", (make, double))
    assert make.runs == 2  # a miss, not an error
    # What it made again is a new artifact: the stage that reads it runs again too (Double's
    # r1 and r2 outputs were made from the deleted one; a retrained model must not keep the
    # deleted model's evaluation).
    assert double.runs == 4
    assert [e.status for e in _executions(root, "r4")] == [
        ExecutionStatus.COMPLETE,
        ExecutionStatus.COMPLETE,
    ]


def test_a_failed_stage_is_recorded_failed_with_its_error_and_never_reused(tmp_path):
    root = str(tmp_path)
    # The run ends in one sentence naming the stage (engine/failures.py), the stage's own
    # error as its cause; the record keeps the stage's own error.
    with pytest.raises(PipelineError, match=r"^Schema stopped on an unexpected error") as ended:
        _run(root, "r1", (MakeNumber(21), Double(fail=True)))
    assert isinstance(ended.value.__cause__, ValueError)
    (make, double) = _executions(root, "r1")
    assert make.status is ExecutionStatus.COMPLETE
    assert (double.status, double.error) == (
        ExecutionStatus.FAILED,
        "ValueError: no number to double",
    )
    assert double.end_time is not None and double.outputs == {}
    retry = Double()
    _run(root, "r2", (MakeNumber(21), retry))
    assert retry.runs == 1


class NothingToDo(Stage):
    """Halts the run without a result, as Transform does without a module file."""

    name = "Schema"
    inputs = (Input(Examples, key="examples"),)
    outputs = (Schema,)

    def run(self, ctx, inputs, out):
        report = StageReport("Nothing", StageStatus.SKIPPED, note="no --module_file")
        return StageResult([report], halt=True)


def test_a_stage_that_halts_the_run_is_recorded_canceled_and_never_reused(tmp_path):
    root = str(tmp_path)
    _run(root, "r1", (MakeNumber(21), NothingToDo()))
    make, halted = _executions(root, "r1")
    assert make.status is ExecutionStatus.COMPLETE
    assert (halted.status, halted.outputs) == (ExecutionStatus.CANCELED, {})
    assert halted.end_time is not None and halted.error is None
    assert halted.properties["reports"][0]["note"] == "no --module_file"
    double = Double()
    _run(root, "r2", (MakeNumber(21), double))
    assert double.runs == 1  # the canceled execution was no cache hit


_PROBE = """
import sys
import beam_pipeline
import test_run_records as t

make, double = t.MakeNumber(21), t.Double()
t._run(sys.argv[1], sys.argv[2], (make, double))
print(beam_pipeline.__file__, make.runs, double.runs)
"""


def test_a_stage_recorded_by_other_code_of_the_pipeline_is_not_reused(tmp_path):
    """The cache key holds the project's sources (and library versions): a run by an
    edited or upgraded copy of the code reruns every stage; the same code reuses them."""
    import importlib.util
    import subprocess
    import sys

    from beam_pipeline.engine.fingerprint import sources_digest

    root = str(tmp_path / "root")
    _run(root, "r1", (MakeNumber(21), Double()))
    code = tmp_path / "code"
    installed = []
    for name in ("beam_pipeline", "transforms", "trainer"):
        installed.append(importlib.util.find_spec(name).submodule_search_locations[0])
        shutil.copytree(installed[-1], code / name, ignore=shutil.ignore_patterns("__pycache__"))
    copies = [str(code / n) for n in ("beam_pipeline", "transforms", "trainer")]
    # The same sources elsewhere (another checkout, a worker image) are the same code.
    assert sources_digest(copies) == sources_digest(installed)
    with open(code / "transforms" / "statistics.py", "a") as f:
        f.write("\n# a fix of the statistics\n")
    assert sources_digest(copies) != sources_digest(installed)
    tests = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), tests])}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, root, "r2"],
        env=env,
        cwd=tmp_path,  # not the checkout: `-c` puts the working directory first
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    package, *runs = done.stdout.split()
    assert package.startswith(str(code))  # the edited copy ran
    assert runs == ["1", "1"]  # both stages ran again
    make, double = MakeNumber(21), Double()
    _run(root, "r3", (make, double))  # this process's code: r1's results
    assert (make.runs, double.runs) == (0, 0)


class MakeSplits(MakeNumber):
    """MakeNumber reporting rows per split, train first (as ExampleGen declares them)."""

    def run(self, ctx, inputs, out):
        result = super().run(ctx, inputs, out)
        result.reports[0].rows_in = {"all": 3}
        result.reports[0].rows_out = {"train": 2, "eval": 1}
        return result


def test_a_reused_stage_lists_its_splits_train_first_as_the_first_run_did(tmp_path):
    # The store keeps a report as JSON with sorted keys: read back as it is, a cached
    # run printed "eval=1 train=2" where the first run printed "train=2 eval=1".
    root = str(tmp_path)
    make = MakeSplits(21)
    first = _run(root, "r1", (make, Double()))
    again = _run(root, "r2", (make, Double()))
    assert make.runs == 1 and again.stages[0].status is StageStatus.CACHED
    for summary in (first, again):
        assert list(summary.stages[0].rows_out) == ["train", "eval"]
        assert "all=3  " in summary.format() and "train=2 eval=1" in summary.format()


def test_a_run_id_another_live_launcher_runs_is_refused_and_its_staging_kept(tmp_path, capsys):
    """Two launches of one --run_id: the second would remove the first's staging folders and
    record its running stages as abandoned. While the recorded launcher is alive (a real
    process of this host) the second is refused in one sentence; once it is gone the same
    command resumes the run."""
    import json
    import socket
    import subprocess
    import sys

    from conftest import PENGUIN_DIR, REPO, one_sentence

    from beam_pipeline import cli

    root = str(tmp_path / "root")
    args = ["--runner=DirectRunner", f"--data={PENGUIN_DIR}/penguins.csv"]
    args += ["--csv_null_values=,NA", f"--pipeline_root={root}", "--run_id=same"]
    code = (
        "import json, sys; from beam_pipeline.metadata.launcher import this_launcher; "
        "print(json.dumps(this_launcher()), flush=True); sys.stdin.read()"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO
    )
    try:
        launcher = json.loads(other.stdout.readline())
        with MetadataStore.for_pipeline_root(root) as store:
            store.start_run("same", properties={"launcher": launcher})
        staging = os.path.join(root, "runs", "same", ".staging", "examples-1")
        os.makedirs(staging)
        assert cli.main(args) == 2
        assert one_sentence(capsys.readouterr().err) == (
            f"Run 'same' is being run now by another launcher (pid {other.pid} on "
            f"{socket.gethostname()}); wait for it to end (or stop it) before resuming it, "
            "or pass another --run_id."
        )
        assert os.path.isdir(staging)
    finally:
        other.communicate(b"")
    assert cli.main(args) == 0
    assert not os.path.exists(staging)
    with MetadataStore.for_pipeline_root(root) as store:
        assert [(r.run_id, r.status.value) for r in store.list_runs()] == [("same", "complete")]
