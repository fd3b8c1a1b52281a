"""The metadata store's API on real SQLite files: recording runs, the cache look-up (a hit
only for a complete execution whose outputs are all published and on disk), cached
executions, history, lineage and the latest blessed model."""

from __future__ import annotations

import os
import shutil

import pytest

from beam_pipeline.core.types import PUBLISHED_MARKER
from beam_pipeline.metadata import (
    ArtifactSpec,
    ArtifactState,
    ExecutionStatus,
    MetadataStore,
    RunStatus,
)


@pytest.fixture
def store(tmp_path):
    with MetadataStore.for_pipeline_root(str(tmp_path / "root")) as opened:
        yield opened


def _published(tmp_path, *parts: str) -> str:
    """A published artifact folder (with its marker), as the run directory leaves one."""
    folder = os.path.join(tmp_path, "root", "runs", *parts)
    os.makedirs(folder)
    open(os.path.join(folder, PUBLISHED_MARKER), "w").close()
    return folder


def _data(fingerprint: str = "digest-a") -> ArtifactSpec:
    return ArtifactSpec("/data/penguins.csv", "ExternalData", fingerprint=fingerprint)


def _run_stage(store, run, tmp_path, stage, key, inputs, role, type_name, props=None):
    """One stage executed and recorded as the runner does it; its output record."""
    execution = store.begin_execution(run, stage, {"stage": stage}, key, inputs)
    uri = _published(tmp_path, run.run_id, role)
    published = store.publish_outputs(execution, {role: ArtifactSpec(uri, type_name, props or {})})
    store.complete_execution(
        execution, job_ids=[f"{run.run_id}-{stage}-job"], properties={"rows": [{"stage": stage}]}
    )
    return published[role]


def _three_stages(store, tmp_path, run_id="run-1"):
    run = store.start_run(run_id, properties={"data": "digest-a"})
    examples = _run_stage(
        store, run, tmp_path, "ExampleGen", "k-eg", {"data": _data()}, "examples", "Examples",
        {"splits": ["train", "eval"], "rows": 344},
    )  # fmt: skip
    schema = _run_stage(
        store, run, tmp_path, "Schema", "k-schema", {"examples": examples}, "schema", "Schema"
    )
    model = _run_stage(
        store, run, tmp_path, "Trainer", "k-train", {"examples": examples, "schema": schema},
        "model", "Model",
    )  # fmt: skip
    store.finish_run(run, RunStatus.COMPLETE, {"accuracy": 0.97})
    return run, examples, schema, model


def test_a_run_is_recorded_with_its_executions_inputs_outputs_and_job_ids(store, tmp_path):
    run, examples, schema, model = _three_stages(store, tmp_path)

    executions = store.run_executions("run-1")
    assert [e.stage for e in executions] == ["ExampleGen", "Schema", "Trainer"]
    assert all(e.status is ExecutionStatus.COMPLETE and e.end_time for e in executions)
    trainer = executions[2]
    assert trainer.inputs == {"examples": examples, "schema": schema}
    assert trainer.outputs == {"model": model}
    assert trainer.parameters == {"stage": "Trainer"}
    assert trainer.beam_job_ids == ("run-1-Trainer-job",)
    assert trainer.cache_key == "k-train" and trainer.run_id == "run-1"
    assert trainer.properties == {"rows": [{"stage": "Trainer"}]}
    assert examples.properties == {"splits": ["train", "eval"], "rows": 344}
    assert examples.state is ArtifactState.PUBLISHED
    assert executions[0].inputs["data"].fingerprint == "digest-a"

    (listed,) = store.list_runs()
    assert (listed.run_id, listed.pipeline, listed.status) == (
        "run-1",
        str(tmp_path / "root"),  # the pipeline's name: its root's absolute path
        "complete",
    )
    assert listed.properties == {"data": "digest-a", "accuracy": 0.97}
    assert listed.end_time >= listed.start_time
    assert dict(listed.stages) == dict.fromkeys(["ExampleGen", "Schema", "Trainer"], "complete")
    assert store.run_executions("no-such-run") is None

    # Another process (a later `runs` command) reads the same file, for the same pipeline.
    with MetadataStore.open(store.url, store.pipeline) as again:
        assert again.run_executions("run-1") == executions
    # Another pipeline sharing the store sees none of it.
    with MetadataStore.open(store.url, "another pipeline") as other:
        assert (other.list_runs(), other.run_executions("run-1")) == ([], None)


def test_a_cache_hit_returns_the_outputs_and_a_cached_execution_records_where_from(store, tmp_path):
    _, examples, schema, _ = _three_stages(store, tmp_path)
    hit = store.find_cached("Schema", "k-schema")
    assert hit.outputs == {"schema": schema} and hit.run_id == "run-1"
    original = store.run_executions("run-1")[1]
    assert (hit.execution_id, hit.end_time) == (original.id, original.end_time)
    assert hit.properties == {"rows": [{"stage": "Schema"}]}

    run2 = store.start_run("run-2")
    cached = store.record_cached(
        run2, "Schema", {"stage": "Schema"}, "k-schema", {"examples": examples}, hit,
        properties={"rows": [{"status": "cached"}]},
    )  # fmt: skip
    store.finish_run(run2, RunStatus.FAILED)
    (execution,) = store.run_executions("run-2")
    assert execution.id == cached.id and execution.status is ExecutionStatus.CACHED
    assert execution.cached_from == hit.execution_id
    assert execution.outputs == {"schema": schema}
    assert execution.properties == {"rows": [{"status": "cached"}]}
    newest = store.list_runs()[0]
    assert (newest.run_id, newest.status, dict(newest.stages)) == (
        "run-2",
        RunStatus.FAILED,
        {"Schema": ExecutionStatus.CACHED},
    )


def _delete_folder(store, tmp_path, schema):
    shutil.rmtree(schema.uri)


def _drop_marker(store, tmp_path, schema):
    os.remove(os.path.join(schema.uri, PUBLISHED_MARKER))  # a partly copied folder


def _mark_deleted(store, tmp_path, schema):
    assert store.mark_deleted([schema.uri]) == 1


@pytest.mark.parametrize("change", [_delete_folder, _drop_marker, _mark_deleted])
def test_an_output_deleted_or_unpublished_is_a_miss_not_an_error(store, tmp_path, change):
    _, _, schema, _ = _three_stages(store, tmp_path)
    change(store, tmp_path, schema)
    assert store.find_cached("Schema", "k-schema") is None
    assert store.find_cached("Trainer", "k-train") is not None  # the others still hit


def test_an_older_execution_whose_outputs_remain_still_hits(store, tmp_path):
    _three_stages(store, tmp_path, "run-1")
    _, _, newer, _ = _three_stages(store, tmp_path, "run-2")
    assert store.find_cached("Schema", "k-schema").run_id == "run-2"
    shutil.rmtree(newer.uri)
    assert store.find_cached("Schema", "k-schema").run_id == "run-1"


def test_running_failed_and_other_keys_never_hit(store, tmp_path):
    run = store.start_run("run-1")
    killed = store.begin_execution(run, "Transform", {}, "k-killed", {"data": _data()})
    failed = store.begin_execution(run, "Transform", {}, "k-failed", {"data": _data()})
    store.fail_execution(failed, "ValueError: bad preprocessing_fn", properties={"rows": 1})
    assert store.find_cached("Transform", "k-killed") is None  # a killed run's execution
    assert store.find_cached("Transform", "k-failed") is None
    _three_stages(store, tmp_path, "run-2")
    assert store.find_cached("Schema", "k-other") is None
    assert store.find_cached("Transform", "k-schema") is None  # a key is per stage
    statuses = {e.id: (e.status, e.error, e.properties) for e in store.run_executions("run-1")}
    assert statuses == {
        killed.id: (ExecutionStatus.RUNNING, None, {}),
        failed.id: (ExecutionStatus.FAILED, "ValueError: bad preprocessing_fn", {"rows": 1}),
    }


def test_a_resume_records_what_the_killed_attempt_left_running_as_abandoned(store, tmp_path):
    run = store.start_run("run-1")
    spec = ArtifactSpec(str(tmp_path / "root" / "runs" / "run-1" / "model"), "Model")
    killed = store.begin_execution(run, "Trainer", {}, "k", {}, outputs={"model": spec})
    failed = store.begin_execution(run, "Transform", {}, "k-failed", {"data": _data()})
    store.fail_execution(failed, "ValueError: bad preprocessing_fn")
    other = store.begin_execution(store.start_run("run-2"), "Trainer", {}, "k2", {})
    # Until the run resumes, a killed attempt's execution is still recorded running.
    before = {e.id: e.status for e in store.run_executions("run-1")}
    assert before[killed.id] is ExecutionStatus.RUNNING
    store.start_run("run-1")  # the resume
    by_id = {e.id: e for e in store.run_executions("run-1")}
    assert by_id[killed.id].status is ExecutionStatus.ABANDONED
    assert by_id[killed.id].error.startswith("its launcher stopped during it")
    assert by_id[killed.id].end_time is not None
    (gone,) = by_id[killed.id].outputs.values()
    assert gone.state is ArtifactState.DELETED
    assert by_id[failed.id].status is ExecutionStatus.FAILED  # ended ones keep their record
    (running,) = store.run_executions("run-2")  # another run's is not this resume's
    assert (running.id, running.status) == (other.id, ExecutionStatus.RUNNING)
    assert store.find_cached("Trainer", "k") is None


def test_declared_outputs_are_pending_until_published_and_deleted_on_failure(store, tmp_path):
    run = store.start_run("run-1")
    spec = ArtifactSpec(str(tmp_path / "root" / "runs" / "run-1" / "model"), "Model")
    execution = store.begin_execution(run, "Trainer", {}, "k", {}, outputs={"model": spec})
    (pending,) = store.run_executions("run-1")[0].outputs.values()
    assert pending.state is ArtifactState.PENDING
    with pytest.raises(ValueError, match="did not publish its outputs"):
        store.complete_execution(execution)
    store.fail_execution(execution, "killed")
    (gone,) = store.run_executions("run-1")[0].outputs.values()
    assert (gone.id, gone.state) == (pending.id, ArtifactState.DELETED)
    with pytest.raises(ValueError, match="is failed"):
        store.publish_outputs(execution, {"model": spec})

    second = store.begin_execution(run, "Trainer", {}, "k2", {}, outputs={"model": spec})
    uri = _published(tmp_path, "run-1", "model2")
    published = store.publish_outputs(second, {"model": ArtifactSpec(uri, "Model", {"n": 1})})
    store.complete_execution(second)
    assert published["model"].state is ArtifactState.PUBLISHED
    assert (published["model"].uri, published["model"].properties) == (uri, {"n": 1})
    assert store.find_cached("Trainer", "k2").outputs == published


def test_an_output_published_again_at_its_uri_supersedes_the_earlier_one(store, tmp_path):
    """A resumed run's rerun stage publishes its folder again: the earlier artifact there
    is deleted, its execution no cache hit, and the uri's lineage is the new one's."""
    _, _, schema, _ = _three_stages(store, tmp_path)
    run = store.start_run("run-1")  # resumed
    execution = store.begin_execution(run, "Schema", {}, "k-schema-2", {})
    store.publish_outputs(execution, {"schema": ArtifactSpec(schema.uri, "Schema")})
    store.complete_execution(execution)
    old, new = (store.run_executions("run-1")[i].outputs["schema"] for i in (1, 3))
    assert (old.id, old.state) == (schema.id, ArtifactState.DELETED)
    assert new.state is ArtifactState.PUBLISHED and new.id != old.id
    assert store.find_cached("Schema", "k-schema") is None
    assert store.find_cached("Schema", "k-schema-2").outputs["schema"].id == new.id
    assert store.lineage(schema.uri).artifact.id == new.id


def test_external_data_is_registered_once_per_content(store, tmp_path):
    run = store.start_run("run-1")
    ids = set()
    for fingerprint in ("digest-a", "digest-a", "digest-b"):
        execution = store.begin_execution(run, "ExampleGen", {}, None, {"data": _data(fingerprint)})
        ids.add((fingerprint, store.run_executions("run-1")[-1].inputs["data"].id))
        store.complete_execution(execution)
    assert len({i for _, i in ids}) == 2 and len(ids) == 2


def test_lineage_walks_producers_upstream_and_everything_downstream(store, tmp_path):
    _, examples, schema, model = _three_stages(store, tmp_path)
    run2 = store.start_run("run-2")
    hit = store.find_cached("Schema", "k-schema")
    store.record_cached(run2, "Schema", {}, "k-schema", {"examples": examples}, hit)

    up = store.lineage(model.uri)
    assert up.artifact == model
    assert [e.stage for e in up.upstream] == ["ExampleGen", "Schema", "Trainer"]
    assert up.downstream == ()
    # The cached Schema execution of run-2 reused the schema: it did not produce it.
    assert [(e.stage, e.run_id) for e in store.lineage(schema.uri).upstream] == [
        ("ExampleGen", "run-1"),
        ("Schema", "run-1"),
    ]
    down = store.lineage("/data/penguins.csv")
    assert down.upstream == ()
    assert [(e.stage, e.run_id, e.status) for e in down.downstream] == [
        ("ExampleGen", "run-1", ExecutionStatus.COMPLETE),
        ("Schema", "run-1", ExecutionStatus.COMPLETE),
        ("Trainer", "run-1", ExecutionStatus.COMPLETE),
        ("Schema", "run-2", ExecutionStatus.CACHED),
    ]
    assert store.lineage("/nowhere") is None


def test_latest_blessed_model(store, tmp_path):
    _, _, _, older = _three_stages(store, tmp_path, "run-1")
    _, _, _, newer = _three_stages(store, tmp_path, "run-2")
    assert store.latest_blessed_model() is None
    store.set_custom_property(older.id, "blessed", True)
    assert store.latest_blessed_model().id == older.id
    store.set_custom_property(newer.id, "blessed", False)
    assert store.latest_blessed_model().id == older.id
    store.set_custom_property(newer.id, "blessed", True)
    blessed = store.latest_blessed_model()
    assert blessed.id == newer.id and blessed.custom_properties == {"blessed": True}
    shutil.rmtree(newer.uri)  # its folder deleted: the older one is the baseline again
    assert store.latest_blessed_model().id == older.id


def test_two_pipelines_in_one_store_see_only_their_own_records(store, tmp_path):
    """A team store: pipelines A and B (other roots) record a run of the same id, with the
    same stages, cache keys and data. Every look-up of B (its runs, a run's executions, a
    cache hit, the latest blessed model, lineage) sees B's records only, and A's stay
    A's: as TFX keys them by pipeline name."""
    a, b = store, store.with_pipeline("pipeline B")
    _, _, a_schema, a_model = _three_stages(a, tmp_path, "nightly")
    a.set_custom_property(a_model.id, "blessed", True)
    data = a.run_executions("nightly")[0].inputs["data"]  # shared by both pipelines
    a_ids = [e.id for e in a.run_executions("nightly")]
    # B before its first run: none of A's records.
    assert (b.list_runs(), b.run_executions("nightly")) == ([], None)
    assert (b.find_cached("Schema", "k-schema"), b.latest_blessed_model()) == (None, None)
    assert (b.lineage(a_schema.uri), b.lineage(data.uri)) == (None, None)

    _, _, b_schema, _ = _three_stages(b, tmp_path / "b", "nightly")
    b_ids = [e.id for e in b.run_executions("nightly")]
    assert len(b_ids) == 3 and not set(a_ids) & set(b_ids)
    assert [(r.run_id, r.pipeline) for r in b.list_runs()] == [("nightly", "pipeline B")]
    assert b.find_cached("Schema", "k-schema").outputs == {"schema": b_schema}
    assert b.latest_blessed_model() is None  # B's model is not blessed; A's is not B's
    lineage = b.lineage(data.uri)
    assert [e.id for e in lineage.downstream] == b_ids
    # A's records are as they were.
    assert [e.id for e in a.run_executions("nightly")] == a_ids
    assert a.find_cached("Schema", "k-schema").outputs == {"schema": a_schema}
    assert a.latest_blessed_model().id == a_model.id
    assert [e.id for e in a.lineage(data.uri).downstream] == a_ids


def test_runs_list_calls_a_run_whose_launcher_was_killed_abandoned(store):
    """A killed launcher leaves its run recorded as running; ``runs list`` tells it from a
    live one by the launcher's pid and start time (a pid reused later is not it)."""
    import signal
    import socket
    import subprocess
    import sys

    from beam_pipeline.history.views import run_rows
    from beam_pipeline.metadata.launcher import _start_ticks, this_launcher

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        killed = {"host": socket.gethostname(), "pid": proc.pid, "start": _start_ticks(proc.pid)}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert killed["start"] is not None
    store.start_run("killed", properties={"launcher": killed})
    store.start_run("live", properties={"launcher": this_launcher()})
    elsewhere = {**this_launcher(), "host": "another-host"}
    store.start_run("elsewhere", properties={"launcher": elsewhere})
    reused = {**this_launcher(), "start": this_launcher()["start"] - 1}  # same pid, older
    store.start_run("reused_pid", properties={"launcher": reused})
    store.start_run("before_launchers")
    finished = store.start_run("finished", properties={"launcher": killed})
    store.finish_run(finished, RunStatus.COMPLETE)
    statuses = {row["run_id"]: row["status"] for row in run_rows(store)}
    assert statuses == {
        "killed": "abandoned",
        "live": "running",
        "elsewhere": "running",  # cannot be told from here
        "reused_pid": "abandoned",
        "before_launchers": "running",
        "finished": "complete",
    }
