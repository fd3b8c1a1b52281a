"""The metadata store on real database servers: PostgreSQL (pg8000) and MariaDB/MySQL
(PyMySQL), the drivers installed with beam-pipeline.

Each test gets a new, empty database on the server (dropped afterwards): the store's
migrations, test_metadata_store.py's tests of the store's API, runs of the CLI with
``--metadata_url`` in the URL forms the docs show and the ``runs`` commands against it,
and four processes recording runs into one store at once. The CLI runs the whole pipeline
on PostgreSQL and the data stages on MySQL/MariaDB: every stage is recorded through the
same store operations, which the API tests cover on both (with the migrations and the
concurrent writers: the DDL, locking and isolation that differ). The servers are those
``scripts/test_deps.sh`` installs and starts as root (a user ``beam_pipeline`` that may
create ``beam_pipeline_test*`` databases); another server can be named by its URL in
BEAM_PIPELINE_TEST_POSTGRESQL_URL / BEAM_PIPELINE_TEST_MYSQL_URL. A
test whose server cannot be reached is skipped, saying so (in CI it fails: see
conftest.service_missing).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import pytest
import sqlalchemy as sa
import test_metadata_store as store_api
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from conftest import PENGUIN_DIR, service_missing
from test_metadata_schema import (
    _WRITER,
    HEAD,
    check_0003_runs_upgraded,
    check_0004_runs_keyed_by_root,
    write_0003_runs,
    write_0004_two_roots,
)

from beam_pipeline.metadata import ExecutionStatus, MetadataStore, RunStatus
from beam_pipeline.metadata.connection import migrate
from beam_pipeline.metadata.schema import METADATA

pytestmark = pytest.mark.slow

_SERVERS = {
    "postgresql": (
        "BEAM_PIPELINE_TEST_POSTGRESQL_URL",
        "postgresql://beam_pipeline:bp4tests@127.0.0.1:5432/beam_pipeline_test",
    ),
    "mysql": (
        "BEAM_PIPELINE_TEST_MYSQL_URL",
        "mysql://beam_pipeline:bp4tests@127.0.0.1:3306/beam_pipeline_test",
    ),
}
_DRIVERS = {"postgresql": "pg8000", "mysql": "pymysql"}


@dataclass(frozen=True)
class Server:
    """A new database on a server: its URL in each form a user may write."""

    backend: str  # "postgresql" or "mysql"
    url: sa.engine.URL  # with the driver named

    @property
    def password(self) -> str:
        return self.url.password

    def driver_url(self) -> str:
        """``postgresql+pg8000://user:password@host:port/db``."""
        return self.url.render_as_string(hide_password=False)

    def plain_url(self) -> str:
        """``postgresql://user:password@host:port/db``: no driver named."""
        return self.url.set(drivername=self.backend).render_as_string(hide_password=False)

    def query_password_url(self) -> str:
        """``postgresql+pg8000://user@host:port/db?password=...``."""
        return (
            self.url.set(password=None)
            .update_query_dict({"password": self.password})
            .render_as_string(hide_password=False)
        )

    def engine(self) -> sa.engine.Engine:
        return sa.create_engine(self.url)


def _admin_engine(backend: str) -> tuple[sa.engine.Engine, sa.engine.URL]:
    variable, default = _SERVERS[backend]
    url = sa.engine.make_url(os.environ.get(variable, default))
    url = url.set(drivername=f"{backend}+{_DRIVERS[backend]}")
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect():
            pass
    except sa.exc.DBAPIError as e:
        engine.dispose()
        reason = str(getattr(e, "orig", e)).splitlines()[0]
        service_missing(
            f"no {backend} server at {url.render_as_string(hide_password=True)} ({reason}): "
            f"`sh scripts/test_deps.sh` as root installs and starts one, or set {variable}"
        )
    return engine, url


@pytest.fixture(params=sorted(_SERVERS))
def server(request):
    """A new, empty database on the server (``request.param``), dropped afterwards."""
    admin, url = _admin_engine(request.param)
    name = f"{url.database}_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield Server(request.param, url.set(database=name))
    finally:
        force = " WITH (FORCE)" if request.param == "postgresql" else ""
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}{force}")
        admin.dispose()


def _revision(engine: sa.engine.Engine) -> str:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def test_the_migrations_create_and_upgrade_the_schema_on_the_server(server):
    engine = server.engine()
    try:
        # A store of the first revision, upgraded when opened (the later migrations alter
        # tables and add an index: DDL that differs from SQLite's).
        with engine.begin() as conn:
            migrate(conn, "0001")
        assert _revision(engine) == "0001"
        with MetadataStore.open(server.driver_url()) as store:
            store.finish_run(store.start_run("r"), RunStatus.COMPLETE)
        assert _revision(engine) == HEAD
        with engine.connect() as conn:
            # What the migrations made is what the queries use (tables, columns, indexes).
            assert compare_metadata(MigrationContext.configure(conn), METADATA) == []
        # Opened again (the schema is current): nothing to do, the run is there.
        with MetadataStore.open(server.plain_url()) as store:
            assert [r.run_id for r in store.list_runs()] == ["r"]
    finally:
        engine.dispose()


def test_runs_recorded_before_0004_get_their_history_on_the_server(server, capsys):
    # 0004 rewrites JSON properties of executions and runs (no DDL): each backend's JSON.
    engine = server.engine()
    try:
        with engine.begin() as conn:
            migrate(conn, "0003")
            write_0003_runs(conn)
        check_0003_runs_upgraded(server.driver_url(), capsys)
        assert _revision(engine) == HEAD
    finally:
        engine.dispose()


def test_runs_recorded_before_0005_are_keyed_by_their_root_on_the_server(server, tmp_path, capsys):
    # 0005 moves runs between pipeline contexts and renames them (no DDL): each backend's JSON.
    engine = server.engine()
    try:
        with engine.begin() as conn:
            migrate(conn, "0004")
            write_0004_two_roots(conn, tmp_path / "a", tmp_path / "b")
        check_0004_runs_keyed_by_root(server.driver_url(), tmp_path / "a", tmp_path / "b", capsys)
        assert _revision(engine) == HEAD
    finally:
        engine.dispose()


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *args],
        cwd=str(cwd),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _cli_here(*args: str) -> subprocess.CompletedProcess:
    """The CLI's entry point in this process, with what it printed (its terminal output:
    its progress, summary, warnings and errors)."""
    from beam_pipeline import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def _store_text(server: Server) -> str:
    """Every row of every table of the store, as text."""
    engine = server.engine()
    try:
        with engine.connect() as conn:
            return "\n".join(
                repr(tuple(row)) for t in METADATA.sorted_tables for row in conn.execute(t.select())
            )
    finally:
        engine.dispose()


def _files_text(root) -> str:
    out = []
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                out.append(f.read().decode("utf-8", "replace"))
    return "\n".join(out)


# What each backend runs through the CLI: the whole pipeline (no tuner, a few steps: the
# store records every stage the same way) on PostgreSQL; the data stages on MySQL/MariaDB
# (a --data run without a module file: ExampleGen+Statistics, Schema, Validation), whose
# records, cache look-ups and ``runs`` commands go through the same store operations.
_RUN_ARGS = {
    "postgresql": ["--no_tuner", "--no_infra_validator", "--train_steps=3"],
    "mysql": [f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}", "--csv_null_values=,NA"],
}


def _data_stages(row: dict) -> dict:
    return {k: v for k, v in row["stages"].items() if k != "Transform"}


def test_a_whole_run_and_the_runs_commands_on_the_server(server, tmp_path):
    root = tmp_path / "root"
    # In memory: what is checked is the store's records and commands, which are the same
    # on every runner mode; multi_processing's fork server and workers (started again for
    # the all-cached run b) only cost time here.
    run_args = [
        "--runner=DirectRunner",
        "--direct_running_mode=in_memory",
        *_RUN_ARGS[server.backend],
        f"--pipeline_root={root}",
    ]
    # The runs through the CLI's entry point in this process (what is checked is the
    # store's records and what the CLI printed, not a fresh interpreter's start); the
    # light `runs` commands in fresh processes.
    # Run a: the password in the query string (pg8000 and PyMySQL take it there).
    a = _cli_here(*run_args, f"--metadata_url={server.query_password_url()}")
    assert a.returncode == 0, a.stderr[-3000:]
    assert a.stderr == ""
    # Run b: the URL form the docs show (no driver named: the installed one), every
    # stage reused from run a.
    b = _cli_here(*run_args, f"--metadata_url={server.plain_url()}")
    assert b.returncode == 0, b.stderr[-3000:]

    where = [f"--metadata_url={server.plain_url()}", f"--pipeline_root={root}"]
    listed = _cli("runs", "list", "--json", *where, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    run_b, run_a = (r["run_id"] for r in rows)  # newest first
    # (Without a module file, the data run records Transform as canceled: not run.)
    ran = rows[1]["stages"] if server.backend == "postgresql" else _data_stages(rows[1])
    reused = rows[0]["stages"] if server.backend == "postgresql" else _data_stages(rows[0])
    assert set(ran.values()) == {"complete"}, rows[1]["stages"]
    assert set(reused.values()) == {"cached"}, rows[0]["stages"]
    assert os.listdir(root / "runs") and {run_a, run_b} == set(os.listdir(root / "runs"))

    shown = _cli("runs", "show", run_a, "--json", *where, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    executions = json.loads(shown.stdout)["executions"]
    stages = [e["stage"] for e in executions]
    assert stages[:3] == ["ExampleGen+Statistics", "Schema", "Validation"], stages
    schema = executions[1]["outputs"]["Schema"]
    assert schema["state"] == "published" and os.path.isdir(schema["uri"])
    if server.backend == "postgresql":
        assert {"Transform", "Trainer", "Evaluator", "Pusher"} <= set(stages), stages
        trainer = next(e for e in executions if e["stage"] == "Trainer")
        assert trainer["outputs"]["Model"]["state"] == "published"
        assert os.path.isdir(trainer["outputs"]["Model"]["uri"])

    table = _cli("runs", "show", run_b, *where, cwd=tmp_path)
    assert table.returncode == 0 and run_a in table.stdout, table.stdout + table.stderr
    diff = _cli("runs", "diff", run_a, run_b, *where, cwd=tmp_path)
    assert diff.returncode == 0 and diff.stderr == "", diff.stderr

    # The password is nowhere: not in the output, the run folders (run.log, summary.json,
    # report.html) or the store's records.
    printed = "".join(p.stdout + p.stderr for p in (a, b, listed, shown, table, diff))
    assert server.password not in printed
    assert server.password not in _files_text(root)
    assert server.password not in _store_text(server)


def test_four_processes_recording_runs_into_one_server_store_lose_nothing(server, tmp_path):
    url, per_run, window, n = server.plain_url(), 15, 3, 4
    run_ids = [f"run-{i}" for i in range(n)]
    go = tmp_path / "go"
    # Each writer keeps within `window` executions of the next one (a ring), so the four
    # interleave however the machine schedules them; each is released by `go` only after
    # all four opened the store (its ready file).
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, url, run_id, run_ids[(i + 1) % n], str(per_run)]
            + [str(window), str(tmp_path / run_id), str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, run_id in enumerate(run_ids)
    ]
    try:
        while not all((tmp_path / run_id).exists() for run_id in run_ids):
            if any(w.poll() is not None for w in writers):
                break  # one failed to open the store: its error is asserted below
            time.sleep(0.01)
        go.touch()
        errors = [w.communicate(timeout=300)[1] for w in writers]
    finally:
        for w in writers:
            w.kill()
            w.wait()
    assert [w.returncode for w in writers] == [0] * n, errors

    with MetadataStore.open(url) as store:
        assert {r.run_id: r.status for r in store.list_runs()} == dict.fromkeys(
            run_ids, RunStatus.COMPLETE
        )
        runs = {run_id: store.run_executions(run_id) for run_id in run_ids}
    for run_id, executions in runs.items():
        assert [e.parameters["i"] for e in executions] == list(range(per_run))
        assert all(e.status is ExecutionStatus.COMPLETE for e in executions)
        assert [e.beam_job_ids for e in executions] == [
            (f"{run_id}-job-{i}",) for i in range(per_run)
        ]
        assert [e.outputs["out"].uri for e in executions] == [
            f"/out/{run_id}/{i}" for i in range(per_run)
        ]
    # The shared input was registered once, not once per process.
    assert len({e.inputs["data"].id for es in runs.values() for e in es}) == 1
    engine = server.engine()
    try:
        with engine.connect() as conn:
            counts = [
                conn.exec_driver_sql(f"SELECT count(*) FROM {t}").scalar()
                for t in ("executions", "events", "artifacts")
            ]
    finally:
        engine.dispose()
    assert counts == [n * per_run, 2 * n * per_run, n * per_run + 1]
    # They wrote at once: ids (in commit order) switch between runs at least once per
    # window of each run.
    order = sorted((e.id, run_id) for run_id, es in runs.items() for e in es)
    switches = sum(x[1] != y[1] for x, y in zip(order, order[1:]))
    assert switches >= n * per_run // (window + 1), switches


@pytest.mark.parametrize("server", ["postgresql"], indirect=True)
def test_libpq_sslmode_on_pg8000_connects_over_tls(server, tmp_path):
    """``?sslmode=require`` (what PostgreSQL URLs use for TLS; pg8000 takes an SSL context
    instead, and ended in a TypeError traceback) connects encrypted; verify-full against
    a certificate no authority signed is one sentence."""
    engine = server.engine()
    try:
        with engine.connect() as conn:
            if conn.exec_driver_sql("SHOW ssl").scalar() != "on":
                service_missing(
                    "the PostgreSQL server has no TLS (scripts/test_deps.sh sets it up)"
                )
    finally:
        engine.dispose()
    url = f"{server.plain_url()}?sslmode=require"
    listed = _cli("runs", "list", f"--metadata_url={url}", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    with MetadataStore.open(url) as store, store._read() as conn:
        assert conn.exec_driver_sql(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ).scalar()
    refused = _cli(
        "runs", "list", f"--metadata_url={server.plain_url()}?sslmode=verify-full", cwd=tmp_path
    )
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("error: Metadata store postgresql+pg8000://"), refused.stderr
    assert "cannot be reached over TLS ([SSL: CERTIFICATE_VERIFY_FAILED]" in refused.stderr
    assert refused.stderr.rstrip().endswith(
        "?sslrootcert=FILE, or use sslmode=require (encrypted, not verified)."
    )
    assert len(refused.stderr.splitlines()) == 1
    assert server.password not in refused.stderr


# test_metadata_store.py's tests of the store's API (written for SQLite files), run on each
# server: the cache look-up, cached executions, lineage, the latest blessed model (a
# property compared as JSON text), resumes and outputs published again are queries whose
# SQL each dialect renders its own way. Each gets a new database.
# (Not the recording test: it reopens the store by its URL, which store.url gives without
# the password; the whole run above records on both servers.)
_STORE_API_TESTS = [
    store_api.test_a_cache_hit_returns_the_outputs_and_a_cached_execution_records_where_from,
    functools.partial(
        store_api.test_an_output_deleted_or_unpublished_is_a_miss_not_an_error,
        change=store_api._mark_deleted,
    ),
    store_api.test_an_older_execution_whose_outputs_remain_still_hits,
    store_api.test_running_failed_and_other_keys_never_hit,
    store_api.test_a_resume_records_what_the_killed_attempt_left_running_as_abandoned,
    store_api.test_declared_outputs_are_pending_until_published_and_deleted_on_failure,
    store_api.test_an_output_published_again_at_its_uri_supersedes_the_earlier_one,
    store_api.test_external_data_is_registered_once_per_content,
    store_api.test_lineage_walks_producers_upstream_and_everything_downstream,
    store_api.test_latest_blessed_model,
    store_api.test_two_pipelines_in_one_store_see_only_their_own_records,
]


@pytest.mark.parametrize(
    "api_test", _STORE_API_TESTS, ids=lambda t: getattr(t, "func", t).__name__[5:45]
)
def test_the_store_api_on_the_server(server, tmp_path, api_test):
    with MetadataStore.open(server.plain_url()) as store:
        api_test(store, tmp_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def team_store(request, tmp_path):
    """One store shared by two pipeline roots: its URL (a SQLite file given as
    ``--metadata_url``, or a new database on the PostgreSQL server, dropped afterwards)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/team.sqlite"
        return
    admin, url = _admin_engine("postgresql")
    name = f"{url.database}_team_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()


def _record_blessed_model(url: str, root) -> None:
    """A blessed model of the pipeline of ``root``, recorded as the runner records one
    (what is under test is the look-up, not the model: its folder need only be published)."""
    from beam_pipeline.core.types import PUBLISHED_MARKER
    from beam_pipeline.metadata import ArtifactSpec

    model = root / "runs" / "trained" / "model"
    model.mkdir(parents=True)
    (model / PUBLISHED_MARKER).touch()
    with MetadataStore.for_pipeline_root(str(root), url) as store:
        run = store.start_run("trained")
        execution = store.begin_execution(run, "Trainer", {}, "k-trainer", {})
        made = store.publish_outputs(execution, {"model": ArtifactSpec(str(model), "Model")})
        store.complete_execution(execution)
        store.set_custom_property(made["model"].id, "blessed", True)
        store.finish_run(run, RunStatus.COMPLETE)


def test_two_pipeline_roots_on_one_store_stay_apart(team_store, tmp_path, capsys):
    """Pipelines A and B (two roots) on one ``--metadata_url``, each with a run "nightly"
    of the same data: B's first run reuses nothing of A's and has no drift baseline (A's
    statistics are not B's), ``runs show nightly`` shows B's run alone, and B's
    ``--warm_start latest_blessed`` does not take A's blessed model."""
    from beam_pipeline import cli

    root_a, root_b = tmp_path / "a", tmp_path / "b"
    args = [
        "--runner=DirectRunner",
        "--direct_running_mode=in_memory",
        f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}",
        "--csv_null_values=,NA",
        "--drift_threshold=0.3",
        f"--metadata_url={team_store}",
        "--run_id=nightly",
    ]
    assert cli.main([*args, f"--pipeline_root={root_a}"]) == 0
    _record_blessed_model(team_store, root_a)
    assert cli.main([*args, f"--pipeline_root={root_b}"]) == 0
    capsys.readouterr()

    with open(root_b / "runs" / "nightly" / "summary.json") as f:
        stages = {s["stage"]: s for s in json.load(f)["stages"]}
    assert [name for name, s in stages.items() if s["status"] == "cached"] == []
    where = [f"--metadata_url={team_store}", f"--pipeline_root={root_b}"]
    assert cli.main(["runs", "show", "nightly", "--json", *where]) == 0
    executions = json.loads(capsys.readouterr().out)["executions"]
    uris = [a["uri"] for e in executions for a in e["outputs"].values()]
    assert uris and all(u.startswith(str(root_b)) for u in uris), uris
    stages_shown = [e["stage"] for e in executions]
    assert len(stages_shown) == len(set(stages_shown)), stages_shown  # B's alone, not A's too
    validation = next(e for e in executions if e["stage"] == "Validation")
    assert validation["parameters"]["drift_baseline"] is None  # not A's statistics

    # The runs of another root: none, and the ones the store holds named.
    assert cli.main(["runs", "list", where[0], f"--pipeline_root={tmp_path / 'c'}"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"No run of pipeline {tmp_path / 'c'} is recorded; the store holds runs of "
        f"{root_a}, {root_b}: pass the --pipeline_root they used (or --pipeline_name)."
    )

    module = os.path.join(PENGUIN_DIR, "penguin_module.py")
    warm = [*args[:-1], "--run_id=warm", f"--module_file={module}", "--warm_start=latest_blessed"]
    assert cli.main([*warm, f"--pipeline_root={root_b}"]) == 2
    (error,) = capsys.readouterr().err.splitlines()
    assert error.startswith(
        "error: --warm_start latest_blessed found no latest blessed model of this pipeline"
    ), error
    assert not (root_b / "runs" / "warm").exists()


def test_a_server_store_dying_during_the_run_is_one_sentence(tmp_path):
    """The store's PostgreSQL database dropped while the run goes (its connections ended
    by the server, as when it goes down): one sentence naming the store (its password
    masked) and the fix, the run's summary written, nothing left staged."""
    from beam_pipeline.core.errors import PipelineError
    from beam_pipeline.engine.events import RunEvents
    from beam_pipeline.flags import parse_config
    from beam_pipeline.pipeline import run

    admin, url = _admin_engine("postgresql")
    name = f"{url.database}_dying_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    dying = url.set(database=name)
    root = tmp_path / "root"
    config = parse_config(
        [
            "--runner=DirectRunner",
            "--direct_running_mode=in_memory",
            f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}",
            "--csv_null_values=,NA",
            "--no_trainer",
            f"--pipeline_root={root}",
            "--run_id=dying",
            f"--metadata_url={dying.render_as_string(hide_password=False)}",
        ]
    )
    events = RunEvents()

    def drop_the_database(stage: str) -> None:
        if stage == "Schema":  # the run has recorded its data stage by now
            with admin.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")

    events.subscribe(stage_started=drop_the_database)
    try:
        with pytest.raises(PipelineError) as raised:
            run(config, events)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()
    message = str(raised.value)
    shown = dying.render_as_string(hide_password=True)
    assert message.startswith(f"Metadata store {shown} stopped answering during the run ("), message
    assert message.endswith(
        "); make sure the server is up and reachable, then run the same command again with "
        "the same --run_id to resume the run."
    ), message
    assert len(message.splitlines()) == 1 and url.password not in message
    assert raised.value.exit_code == 2
    assert (root / "runs" / "dying" / "summary.json").exists()
    assert not (root / "runs" / "dying" / ".staging").exists()
