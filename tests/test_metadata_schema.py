"""The metadata store's schema, concurrency and bad input, on real SQLite files and real
processes: the schema made by the migrations from an empty file and upgraded from the
previous revision with its rows; two processes writing one store at once; every way a
``--metadata_url`` can be wrong named in one sentence (a PipelineError) at open time."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from conftest import free_port

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.types import PUBLISHED_MARKER
from beam_pipeline.metadata import ExecutionStatus, MetadataStore, RunStatus, default_url
from beam_pipeline.metadata.connection import migrate
from beam_pipeline.metadata.schema import METADATA

HEAD = "0005"


def _url(path) -> str:
    return f"sqlite:///{path}"


def _revision(path) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT version_num FROM alembic_version").fetchone()[0]


def test_the_schema_is_created_from_an_empty_file_and_matches_schema_py(tmp_path):
    for path in (tmp_path / "new.sqlite", tmp_path / "empty.sqlite"):
        if path.name == "empty.sqlite":
            path.write_bytes(b"")  # a 0-byte file is an empty SQLite database
        MetadataStore.open(_url(path)).close()
        assert _revision(path) == HEAD
        engine = sa.create_engine(_url(path))
        with engine.connect() as conn:
            # What the migrations made is what the queries use (tables, columns, indexes).
            assert compare_metadata(MigrationContext.configure(conn), METADATA) == []
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        engine.dispose()


def _old_store_with_rows(path, revision: str) -> None:
    """A store at an older ``revision`` holding one run with one complete execution,
    written with revision 0001's columns (as an older beam-pipeline wrote it)."""
    schema = path.parent / "schema"  # its output, a published folder
    schema.mkdir()
    (schema / PUBLISHED_MARKER).touch()
    engine = sa.create_engine(_url(path))
    with engine.begin() as conn:
        migrate(conn, revision)
        conn.exec_driver_sql(
            "INSERT INTO types (id, kind, name) VALUES (1, 'context', 'pipeline'), "
            "(2, 'context', 'run'), (3, 'execution', 'Schema'), (4, 'artifact', 'Schema')"
        )
        conn.exec_driver_sql(
            "INSERT INTO contexts VALUES (1, 1, 'beam-pipeline', '{}', 1000, 1000), "
            '(2, 2, \'old-run\', \'{"status": "complete", "end_time_ms": 3000, '
            '"properties": {"data": "d"}}\', 1000, 3000)'
        )
        conn.exec_driver_sql("INSERT INTO parent_contexts VALUES (2, 1)")
        conn.exec_driver_sql(
            "INSERT INTO executions (id, type_id, status, cache_key, parameters, "
            "start_time_ms, end_time_ms) VALUES (1, 3, 'complete', 'k', '{\"a\": 1}', 1000, 2000)"
        )
        conn.exec_driver_sql(
            f"INSERT INTO artifacts VALUES (1, 4, '{schema}', 'published', 'fp', 2000, 2000)"
        )
        conn.exec_driver_sql("INSERT INTO artifact_properties VALUES (1, 'features', 0, '8')")
        conn.exec_driver_sql("INSERT INTO events VALUES (1, 1, 1, 'output', 'schema', 2000)")
        conn.exec_driver_sql("INSERT INTO associations VALUES (2, 1)")
        conn.exec_driver_sql("INSERT INTO attributions VALUES (2, 1)")
    engine.dispose()


@pytest.mark.parametrize("revision, missing", [("0001", "beam_job_ids"), ("0002", "properties")])
def test_a_store_of_an_older_revision_is_upgraded_keeping_its_rows(tmp_path, revision, missing):
    path = tmp_path / "old.sqlite"
    _old_store_with_rows(path, revision)
    assert _revision(path) == revision
    with sqlite3.connect(path) as db:
        columns = {row[1] for row in db.execute("PRAGMA table_info(executions)")}
    assert missing not in columns

    with MetadataStore.open(_url(path)) as store:
        assert _revision(path) == HEAD
        (run,) = store.list_runs()
        assert (run.run_id, run.status, run.properties) == (
            "old-run",
            RunStatus.COMPLETE,
            # 0004: the columns every run listed then (their values where none is recorded).
            {"data": "d", "history_columns": {"metrics": {}, "blessed": None, "pushed": None}},
        )
        (execution,) = store.run_executions("old-run")
        assert (execution.stage, execution.status, execution.parameters) == (
            "Schema",
            ExecutionStatus.COMPLETE,
            {"a": 1},
        )
        # The new columns' defaults for old rows.
        assert (execution.beam_job_ids, execution.properties) == ((), {})
        assert execution.outputs["schema"].properties == {"features": 8}
        # The old execution is a cache hit (its folder is there), looked up by the new index.
        assert store.find_cached("Schema", "k").execution_id == 1
        new_run = store.start_run("new-run")
        new = store.begin_execution(new_run, "Schema", {}, "k2", {})
        store.complete_execution(new, job_ids=["job-1"])
        assert store.run_executions("new-run")[0].beam_job_ids == ("job-1",)
    with sqlite3.connect(path) as db:
        indexes = {row[1] for row in db.execute("PRAGMA index_list(executions)")}
    assert "ix_executions_cache" in indexes


# Summary rows as beam-pipeline recorded them before revision 0004 (no ``history``):
# the data stage over spans 2-3 (2 reused), a model with metrics that missed a threshold,
# and a Pusher that did not push it.
_OLD_ROWS = {
    "ExampleGen+Statistics": [
        {"stage": "ExampleGen", "status": "ok", "note": "spans 2-3",
         "details": {"spans": [2, 3], "spans_reused": [2], "spans_read": [3]}},
        {"stage": "Statistics", "status": "ok", "note": "", "details": {}},
    ],
    "Tuner": [
        {"stage": "Tuner", "status": "ok", "note": "",
         "details": {"best_hyperparameters": {"learning_rate": 0.01}}},
    ],
    "Trainer": [
        {"stage": "Trainer", "status": "ok", "note": "", "details": {"metrics": {"acc": 0.5}}},
    ],
    "Evaluator": [
        {"stage": "Evaluator", "status": "ok", "note": "NOT blessed: 1 threshold missed",
         "details": {"blessed": False, "failures": [
             {"metric": "acc", "slice": "Overall", "value": 0.5, "bound": ">= 0.6", "by": 0.1}
         ]}},
    ],
    "Pusher": [
        {"stage": "Pusher", "status": "skipped", "note": "not pushed: not blessed",
         "details": {"pushed": False, "destination": None}},
    ],
}  # fmt: skip


def write_0003_runs(conn: sa.engine.Connection) -> None:
    """Three runs as beam-pipeline recorded them at revision 0003 (on ``conn``, migrated
    to it): old-a and old-b with an execution of each stage of :data:`_OLD_ROWS`, holding
    only its summary rows; old-c, which failed before any execution. Written with the
    schema's tables (0004 changes no column), so that any backend gets the same rows."""
    from beam_pipeline.metadata import schema as s

    conn.execute(
        sa.insert(s.types),
        [
            {"id": 1, "kind": "context", "name": "pipeline"},
            {"id": 2, "kind": "context", "name": "run"},
        ]
        + [{"id": 10 + i, "kind": "execution", "name": stage} for i, stage in enumerate(_OLD_ROWS)],
    )
    times = {"create_time_ms": 1000, "update_time_ms": 3000}
    conn.execute(
        sa.insert(s.contexts),
        [{"id": 1, "type_id": 1, "name": "beam-pipeline", "properties": {}, **times}]
        + [
            {
                "id": number,
                "type_id": 2,
                "name": run_id,
                "properties": {"status": "complete", "end_time_ms": 3000, "properties": {}},
                **times,
            }
            for number, run_id in [(2, "old-a"), (3, "old-b"), (4, "old-c")]
        ],
    )
    conn.execute(
        sa.insert(s.parent_contexts),
        [{"context_id": n, "parent_context_id": 1} for n in (2, 3, 4)],
    )
    for number in (2, 3):
        for i, rows in enumerate(_OLD_ROWS.values()):
            conn.execute(
                sa.insert(s.executions).values(
                    id=100 * number + i,
                    type_id=10 + i,
                    status="complete",
                    cache_key=f"k{i}",
                    parameters={},
                    start_time_ms=1000,
                    end_time_ms=2000,
                    properties={"reports": rows},
                )
            )
            conn.execute(
                sa.insert(s.associations).values(context_id=number, execution_id=100 * number + i)
            )


_OLD_PIPELINE = "--pipeline_name=beam-pipeline"


def check_0003_runs_upgraded(url: str, capsys) -> None:
    """The runs of :func:`write_0003_runs` as the ``runs`` commands show them once the
    store at ``url`` is opened (and upgraded): as they were shown before 0004 (under the
    pipeline name of runs whose root 0005 cannot tell: they have no artifacts)."""
    import json

    from beam_pipeline import cli

    assert cli.main(["runs", "list", f"--metadata_url={url}", _OLD_PIPELINE, "--json"]) == 0
    rows = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    row = rows["old-a"]
    assert (row["metrics"], row["blessed"], row["pushed"]) == ({"acc": 0.5}, False, False)
    assert (row["spans"], row["spans_reused"]) == ([2, 3], [2])
    assert row["columns"] == {"metrics": {"acc": 0.5}, "blessed": False, "pushed": False}
    row = rows["old-c"]
    assert (row["metrics"], row["blessed"], row["pushed"]) == ({}, None, None)
    assert row["columns"] == {"metrics": {}, "blessed": None, "pushed": None}
    with MetadataStore.open(url) as store:
        trainer = next(e for e in store.run_executions("old-a") if e.stage == "Trainer")
        assert trainer.properties["history"]["columns"] == {"metrics": {"acc": 0.5}}
    assert cli.main(["runs", "list", f"--metadata_url={url}", _OLD_PIPELINE]) == 0
    listed = capsys.readouterr().out
    header = next(line for line in listed.splitlines() if "run" in line and "status" in line)
    assert [c.strip() for c in header.strip("┃│ ").split("┃")] == [
        "run", "start", "status", "metrics", "blessed", "pushed", "cached",
    ]  # fmt: skip
    assert "acc=0.5" in listed and " no " in listed
    old_c = next(line for line in listed.splitlines() if "old-c" in line)
    assert [c.strip() for c in old_c.strip("│ ").split("│")][3:6] == ["-", "-", "-"]

    assert cli.main(["runs", "show", "old-a", f"--metadata_url={url}", _OLD_PIPELINE]) == 0
    shown = capsys.readouterr().out
    assert "Data: spans 2-3 (span 2 reused from earlier runs, not read)" in shown
    checks = shown.split("Model checks", 1)[1]
    assert "NOT blessed: 1 threshold missed" in checks and "not pushed: not blessed" in checks
    assert "Failed thresholds" in checks and ">= 0.6" in checks

    diff = ["runs", "diff", "old-a", "old-b", f"--metadata_url={url}", _OLD_PIPELINE, "--json"]
    assert cli.main(diff) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["metrics"] == {"acc": [0.5, 0.5]}
    assert d["hyperparameters"] == {"learning_rate": [0.01, 0.01]}


def test_runs_recorded_before_0004_get_their_history_and_still_list(tmp_path, capsys):
    """A store of revision 0003, whose executions hold only their summary rows, is upgraded
    to 0004 with each execution's history filled from them and each run's columns: ``runs
    list`` still shows the model's metrics, blessed and pushed (``-`` for a run that made
    none), ``runs show`` the spans and the failed check, ``runs diff`` the metrics and
    hyperparameters, as before."""
    path = tmp_path / "old.sqlite"
    engine = sa.create_engine(_url(path))
    with engine.begin() as conn:
        migrate(conn, "0003")
        write_0003_runs(conn)
    engine.dispose()
    check_0003_runs_upgraded(_url(path), capsys)
    assert _revision(path) == HEAD


def write_0004_two_roots(conn: sa.engine.Connection, root_a, root_b) -> None:
    """Runs as beam-pipeline recorded them at revision 0004, all under its one pipeline
    context ``beam-pipeline``, each context named by its run id: "nightly" of pipeline
    root A, whose Schema output lies in ``<root_a>/runs/nightly/schema`` (published, a
    cache hit); "failed" of root A, which made nothing (its run folder is there); and
    "other" of root B, with its output in ``<root_b>/runs/other/schema``."""
    from beam_pipeline.metadata import schema as s

    for root, run_id in [(root_a, "nightly"), (root_a, "failed"), (root_b, "other")]:
        os.makedirs(os.path.join(root, "runs", run_id))
    for root, run_id in [(root_a, "nightly"), (root_b, "other")]:
        folder = os.path.join(root, "runs", run_id, "schema")
        os.makedirs(folder)
        open(os.path.join(folder, PUBLISHED_MARKER), "w").close()

    def insert(table, **values) -> int:  # ids by the database (a server's sequences too)
        return conn.execute(sa.insert(table).values(**values)).inserted_primary_key[0]

    types = {
        (kind, name): insert(s.types, kind=kind, name=name)
        for kind, name in [
            ("context", "pipeline"), ("context", "run"), ("execution", "Schema"),
            ("artifact", "Schema"),
        ]
    }  # fmt: skip
    times = {"create_time_ms": 1000, "update_time_ms": 3000}
    props = {"status": "complete", "end_time_ms": 3000, "properties": {}}
    pipeline = insert(
        s.contexts, type_id=types["context", "pipeline"], name="beam-pipeline", properties={},
        **times,
    )  # fmt: skip
    runs = {}
    for run_id in ("nightly", "failed", "other"):
        runs[run_id] = insert(
            s.contexts, type_id=types["context", "run"], name=run_id, properties=props, **times
        )
        conn.execute(
            sa.insert(s.parent_contexts).values(context_id=runs[run_id], parent_context_id=pipeline)
        )
    for root, run_id in [(root_a, "nightly"), (root_b, "other")]:
        execution = insert(
            s.executions, type_id=types["execution", "Schema"], status="complete",
            cache_key="k", parameters={}, start_time_ms=1000, end_time_ms=2000,
        )  # fmt: skip
        artifact = insert(
            s.artifacts, type_id=types["artifact", "Schema"],
            uri=os.path.join(root, "runs", run_id, "schema"), state="published",
            fingerprint=None, create_time_ms=2000, update_time_ms=2000,
        )  # fmt: skip
        conn.execute(
            sa.insert(s.events).values(
                execution_id=execution, artifact_id=artifact, type="output", role="Schema",
                time_ms=2000,
            )
        )  # fmt: skip
        conn.execute(
            sa.insert(s.associations).values(context_id=runs[run_id], execution_id=execution)
        )
        conn.execute(
            sa.insert(s.attributions).values(context_id=runs[run_id], artifact_id=artifact)
        )


def check_0004_runs_keyed_by_root(url: str, root_a, root_b, capsys) -> None:
    """After the upgrade, each run of :func:`write_0004_two_roots` is its root's: listed,
    shown and reused under the name its root derives, and not under the other's. On a
    server, "failed" (no artifacts, no store file beside its folder, runs of two roots in
    the store) stays under ``beam-pipeline``."""
    import json

    from beam_pipeline import cli

    failed = ["failed"] if url.startswith("sqlite") else []
    with MetadataStore.open(url) as store:  # the old name
        assert [r.run_id for r in store.list_runs()] == ([] if failed else ["failed"])
    for root, run_ids in [(root_a, [*failed, "nightly"]), (root_b, ["other"])]:
        where = [f"--metadata_url={url}", f"--pipeline_root={root}"]
        assert cli.main(["runs", "list", *where, "--json"]) == 0
        assert sorted(r["run_id"] for r in json.loads(capsys.readouterr().out)) == run_ids
        assert cli.main(["runs", "show", run_ids[-1], *where, "--json"]) == 0
        (execution,) = json.loads(capsys.readouterr().out)["executions"]
        assert execution["outputs"]["Schema"]["uri"].startswith(str(root))
        with MetadataStore.for_pipeline_root(str(root), url) as store:
            assert store.find_cached("Schema", "k").run_id == run_ids[-1]
    assert cli.main(["runs", "show", "other", f"--metadata_url={url}", f"--pipeline_root={root_a}"])
    assert "No run 'other' is recorded" in capsys.readouterr().err


def test_runs_recorded_before_0005_are_keyed_by_their_pipeline_root(tmp_path, capsys):
    """A store shared by two pipeline roots (``--metadata_url``), written at revision 0004,
    where every run was one pipeline's: upgraded, each run is under the pipeline name its
    root derives (a run without artifacts: the root its folder is in, the default store's
    folder), so each root sees its own runs and reuses only its own outputs."""
    root_a, root_b = tmp_path / "a", tmp_path / "b"
    os.makedirs(root_a)
    path = root_a / "metadata.sqlite"  # A's default store, given to B as its URL
    engine = sa.create_engine(_url(path))
    with engine.begin() as conn:
        migrate(conn, "0004")
        write_0004_two_roots(conn, root_a, root_b)
    engine.dispose()
    check_0004_runs_keyed_by_root(_url(path), root_a, root_b, capsys)
    assert _revision(path) == HEAD


# Two processes open one new store at once (both may create the schema), then, released
# together, each records a run of many executions, all reading one shared data artifact.
# Neither gets more than _WINDOW executions ahead of the other (it reads the other's count
# from the store), so their writes interleave even when the machine's load would let one
# finish before the other starts.
_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from beam_pipeline.metadata import ArtifactSpec, MetadataStore, RunStatus
    url, run_id, other, n, window, ready, go = sys.argv[1:]
    store = MetadataStore.open(url)
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.005)
    run = store.start_run(run_id)
    data = ArtifactSpec("/data/shared.csv", "ExternalData", fingerprint="one")
    for i in range(int(n)):
        while i - len(store.run_executions(other) or ()) > int(window):
            time.sleep(0.005)
        e = store.begin_execution(run, "Stage", {"i": i}, f"{run_id}-{i}", {"data": data})
        store.publish_outputs(e, {"out": ArtifactSpec(f"/out/{run_id}/{i}", "Out")})
        store.complete_execution(e, job_ids=[f"{run_id}-job-{i}"])
    store.finish_run(run, RunStatus.COMPLETE)
    """
)
_PER_RUN = 50
_WINDOW = 5


def test_two_processes_writing_one_sqlite_store_at_once_lose_nothing(tmp_path):
    url = _url(tmp_path / "metadata.sqlite")
    go = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, url, run_id, other, str(_PER_RUN), str(_WINDOW)]
            + [str(tmp_path / run_id), str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for run_id, other in (("run-a", "run-b"), ("run-b", "run-a"))
    ]
    try:
        for run_id in ("run-a", "run-b"):
            while not (tmp_path / run_id).exists():  # opened
                time.sleep(0.01)
                assert all(w.poll() is None for w in writers), [w.stderr.read() for w in writers]
        go.touch()
        errors = [w.communicate(timeout=300)[1] for w in writers]
    finally:
        for w in writers:
            w.kill()
    assert [w.returncode for w in writers] == [0, 0], errors

    with MetadataStore.open(url) as store:
        assert {r.run_id: r.status for r in store.list_runs()} == {
            "run-a": RunStatus.COMPLETE,
            "run-b": RunStatus.COMPLETE,
        }
        runs = {run_id: store.run_executions(run_id) for run_id in ("run-a", "run-b")}
    for run_id, executions in runs.items():
        assert [e.parameters["i"] for e in executions] == list(range(_PER_RUN))
        assert all(e.status is ExecutionStatus.COMPLETE for e in executions)
        assert [e.beam_job_ids for e in executions] == [
            (f"{run_id}-job-{i}",) for i in range(_PER_RUN)
        ]
        assert [e.outputs["out"].uri for e in executions] == [
            f"/out/{run_id}/{i}" for i in range(_PER_RUN)
        ]
    # The shared input was registered once, not once per process.
    assert len({e.inputs["data"].id for es in runs.values() for e in es}) == 1
    with sqlite3.connect(tmp_path / "metadata.sqlite") as db:
        counts = [
            db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("executions", "events", "artifacts")
        ]
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert counts == [2 * _PER_RUN, 4 * _PER_RUN, 2 * _PER_RUN + 1]
    # The two wrote at once: their executions interleave (ids are in commit order), in
    # blocks of at most _WINDOW + 1 of one run (so at least 2 * 50 / 6 - 1 = 15 switches;
    # 75-88 of the 99 possible measured in 3 runs on the loaded machine).
    order = sorted((e.id, run_id) for run_id, es in runs.items() for e in es)
    switches = sum(a[1] != b[1] for a, b in zip(order, order[1:]))
    assert switches >= _PER_RUN // _WINDOW, switches


def _newer_store(tmp_path) -> str:
    path = tmp_path / "newer.sqlite"
    MetadataStore.open(_url(path)).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE alembic_version SET version_num = '0099'")
    return _url(path)


def _corrupt_file(tmp_path) -> str:
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(bytes(range(256)) * 16)  # 4 KiB of garbage where the header should be
    return _url(path)


def _foreign_database(tmp_path) -> str:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE customers (id INTEGER)")
    return _url(path)


@pytest.mark.parametrize(
    "make_url, message",
    [
        (_newer_store, r"newer\.sqlite was written by a newer beam-pipeline \(schema revision "
         r"0099; this version knows up to 0005\); upgrade beam-pipeline"),
        (_corrupt_file, r"corrupt\.sqlite is not a SQLite database or is corrupt \(file is not a "
         r"database\); move the file away"),
        (lambda t: _url(t / "missing" / "metadata.sqlite"),
         r"cannot open or write the SQLite file .*missing/metadata\.sqlite \(unable to open "
         r"database file\); make sure its folder .*missing exists and is writable"),
        (_foreign_database, r"other\.sqlite holds other tables \(customers\) and no "
         r"beam-pipeline schema; pass the URL of an empty database"),
        (lambda t: f"postgresql+pg8000://beam:secret@127.0.0.1:{free_port()}/metadata",
         r"Metadata store postgresql\+pg8000://beam:\*\*\*@127\.0\.0\.1:\d+/metadata cannot be "
         r"reached \(.*\); pass a reachable SQLAlchemy URL with --metadata_url"),
        (lambda t: "nosuchdb://host/db",
         r"--metadata_url nosuchdb://host/db needs a database driver that is not installed"),
        (lambda t: "not a url", r"--metadata_url 'not a url' is not a database URL"),
        (lambda t: "sqlite://", r"names no SQLite file"),
    ],
    ids=["newer", "corrupt", "missing-folder", "foreign", "no-server", "no-driver", "bad-url",
         "in-memory"],
)  # fmt: skip
def test_a_bad_metadata_url_is_one_sentence_at_open(tmp_path, make_url, message):
    url = make_url(tmp_path)
    with pytest.raises(PipelineError, match=message) as raised:
        MetadataStore.open(url)
    assert raised.value.exit_code == 2
    assert "secret" not in str(raised.value)
    assert str(raised.value).count(". ") == 0 and str(raised.value).endswith(".")


def test_a_remote_pipeline_root_needs_a_metadata_url():
    with pytest.raises(
        PipelineError, match=r"--pipeline_root gs://b/root is remote.*--metadata_url"
    ):
        default_url("gs://b/root")


# The child drops to the unprivileged user "nobody" when it runs as root (root writes
# anywhere), after its imports: the interpreter may live where "nobody" cannot read.
_OPEN = textwrap.dedent(
    """
    import os, sys
    import sqlite3, sqlalchemy.dialects.sqlite.pysqlite
    from beam_pipeline.core.errors import PipelineError
    from beam_pipeline.metadata import MetadataStore
    if os.geteuid() == 0:
        os.setuid(65534)
    try:
        MetadataStore.open(sys.argv[1])
    except PipelineError as e:
        print(e, file=sys.stderr)
        sys.exit(e.exit_code)
    """
)


def test_a_store_in_a_read_only_folder_is_one_sentence_at_open():
    folder = tempfile.mkdtemp(prefix="readonly-store-")  # in /tmp: "nobody" can reach it
    try:
        os.chmod(folder, 0o555)
        done = subprocess.run(
            [sys.executable, "-c", _OPEN, _url(os.path.join(folder, "metadata.sqlite"))],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.chmod(folder, 0o755)
        os.rmdir(folder)
    assert done.returncode == 2, done.stderr
    assert "cannot open or write the SQLite file" in done.stderr
    assert f"make sure its folder {folder} exists and is writable" in done.stderr


def test_a_store_whose_disk_fills_during_the_run_is_one_sentence(tmp_path, capsys):
    """The store's SQLite file on a disk that fills once the run has opened it (a small
    tmpfs, filled but for 64 KiB): one sentence naming the store (its password masked)
    and the fix, exit 2, no traceback, nothing left staged."""
    from test_unclear_endings import _PENGUINS, _small_disk

    from beam_pipeline import cli

    root = tmp_path / "root"
    with _small_disk(tmp_path, "256k") as disk:
        url = f"sqlite:///{disk}/metadata.sqlite?password=s3cr3t"
        MetadataStore.open(url).close()  # created with room to spare
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        with open(os.path.join(disk, "filler"), "wb") as f:
            f.write(b"\0" * (free - (64 << 10)))
        code = cli.main(
            [
                "--runner=DirectRunner",
                "--direct_running_mode=in_memory",
                f"--data={_PENGUINS}",
                "--csv_null_values=,NA",
                "--no_trainer",
                f"--pipeline_root={root}",
                "--run_id=full",
                f"--metadata_url={url}",
            ]
        )
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: Metadata store sqlite:///{disk}/metadata.sqlite?password=***: the disk "
        f"holding {disk} is full (database or disk is full); free space there, then run the "
        "same command again with the same --run_id to resume the run."
    ]
    assert not (root / "runs" / "full" / ".staging").exists()
