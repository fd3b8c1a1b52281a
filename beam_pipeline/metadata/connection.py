"""Opening a metadata store: the URL, SQLite's settings for concurrent runs, the schema's
migrations, and one sentence for every way the URL can be wrong.

Everything that can fail about the store fails in :func:`open_engine`, before a run starts
any Beam job: an unparsable URL, a driver that is not installed, a server that does not
answer, a SQLite file whose folder is missing or read-only, a file that is not a SQLite
database, a database holding other tables, a store written by a newer version of
beam-pipeline (a schema revision this version does not know), and a query parameter the
driver does not take. Every URL shown is masked (:mod:`beam_pipeline.core.secrets`).

Servers: a URL without a driver gets the one installed with beam-pipeline
(:data:`DEFAULT_DRIVERS`: ``postgresql://`` is pg8000's, ``mysql://`` PyMySQL's); on
pg8000, libpq's ``?sslmode=`` is translated to the TLS context pg8000 takes.

SQLite, several runs at once: the file is put in WAL mode (readers never block the one
writer), every write transaction starts with ``BEGIN IMMEDIATE`` (it takes the write lock
first, so a transaction never fails half-way on a lock another process took after it began
reading, which is what SQLite's default deferred ``BEGIN`` does under concurrency) and
waits up to :data:`BUSY_TIMEOUT_S` for the lock; the store's transactions are a few
statements each. WAL needs a local disk (not NFS): see docs/metadata-store.md. On a server
(PostgreSQL, MySQL/MariaDB) each write transaction likewise starts by taking one row lock
(:func:`_server_settings`), so concurrent launchers' writes never conflict half-way.

Schema: Alembic runs the migrations in ``migrations/versions`` up to the newest revision
inside the same locked transaction that checks the revision, so two launchers opening a
new file at once create the tables once; on PostgreSQL and MySQL/MariaDB a server-side
lock (:func:`_schema_lock`) serialises the check and the migrations the same way.

Example::

    engine = open_engine("sqlite:////data/pipeline_root/metadata.sqlite")
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
from collections.abc import Iterator
from typing import Any, Optional

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, exc

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, no_room
from beam_pipeline.core.secrets import mask

__all__ = [
    "BUSY_TIMEOUT_S",
    "METADATA_FILE",
    "default_url",
    "migrate",
    "open_engine",
    "write_error",
]

METADATA_FILE = "metadata.sqlite"
# How long a SQLite writer waits for another process's write transaction (each is a few
# statements: milliseconds) before giving up.
BUSY_TIMEOUT_S = 60.0
MIGRATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")
# Execution option of a connection that only reads: a deferred BEGIN on SQLite.
READ_ONLY = "beam_pipeline_read_only"
_FIX = "pass a reachable SQLAlchemy URL with --metadata_url"
# The driver of a URL that names none (postgresql://, mysql://): the one installed with
# beam-pipeline (setup.py), not SQLAlchemy's default (psycopg2, mysqlclient: C extensions
# that are not). A URL naming a driver (postgresql+psycopg2://) uses that one.
DEFAULT_DRIVERS = {"postgresql": "pg8000", "mysql": "pymysql", "mariadb": "pymysql"}
# Where a driver's TLS settings go, for the error naming an option it does not take.
_TLS_HINT = {
    "pg8000": "for TLS: ?sslmode=require, verify-ca or verify-full, with ?sslrootcert=FILE",
    "pymysql": "for TLS: ?ssl_ca=FILE, with ssl_cert, ssl_key, ssl_check_hostname",
}


def default_url(pipeline_root: str) -> str:
    """The default store: a SQLite file ``metadata.sqlite`` in the pipeline root.

    Raises:
      PipelineError: the pipeline root is remote (``gs://...``), where SQLite cannot live.
    """
    if fileio.is_remote(pipeline_root):
        raise PipelineError(
            f"--pipeline_root {pipeline_root} is remote, where a SQLite metadata store cannot "
            "live; pass --metadata_url (e.g. postgresql://user@host/db) for the store."
        )
    return "sqlite:///" + os.path.join(os.path.abspath(pipeline_root), METADATA_FILE)


def _shown(url: sa.engine.URL | str) -> str:
    """The URL as an error may print it: without its password or other credentials
    (:func:`beam_pipeline.core.secrets.mask`)."""
    if isinstance(url, str):
        return mask(url)
    return mask(url.render_as_string(hide_password=True))


def _with_default_driver(url: sa.engine.URL) -> sa.engine.URL:
    """``url`` with the driver beam-pipeline installs, where it names none."""
    driver = DEFAULT_DRIVERS.get(url.drivername)
    return url.set(drivername=f"{url.drivername}+{driver}") if driver else url


def _pg8000_tls(url: sa.engine.URL) -> tuple[sa.engine.URL, dict[str, Any]]:
    """libpq's ``sslmode`` (and ``sslrootcert``) of a pg8000 URL as pg8000's ssl_context.

    Hand-written: pg8000 takes TLS only as an ``ssl.SSLContext`` object, which a URL
    cannot carry, and ``sslmode`` is how PostgreSQL URLs ask for TLS everywhere else.
    """
    mode = url.query.get("sslmode")
    if url.drivername != "postgresql+pg8000" or mode is None:
        return url, {}
    cafile: Optional[str] = url.query.get("sslrootcert") or None
    url = url.difference_update_query(["sslmode", "sslrootcert"])
    if mode == "disable":
        return url, {}
    if mode not in ("require", "verify-ca", "verify-full"):
        raise PipelineError(
            f"--metadata_url {_shown(url)}: sslmode={mode} is not supported by the pg8000 "
            "driver (it cannot fall back between encrypted and plain connections); use "
            "sslmode=disable, require, verify-ca or verify-full, or a postgresql+psycopg2:// "
            "URL after pip install psycopg2-binary."
        )
    context = ssl.create_default_context(cafile=cafile)
    if mode != "verify-full":  # as libpq: verify-ca checks the chain but not the host name
        context.check_hostname = False
    if mode == "require":  # as libpq: encrypted, the server's certificate not checked
        context.verify_mode = ssl.CERT_NONE
    return url, {"ssl_context": context}


def _option_error(url: sa.engine.URL, e: TypeError) -> Optional[PipelineError]:
    """A driver's TypeError for a query parameter it does not take, as one sentence."""
    found = re.search(r"unexpected keyword argument '(\w+)'", str(e))
    if not found or found.group(1) not in url.query:
        return None
    option, driver = found.group(1), url.get_driver_name()
    hint = _TLS_HINT.get(driver)
    return PipelineError(
        f"--metadata_url {_shown(url)}: the {driver} driver takes no option {option!r}; "
        f"remove ?{option}= from the URL" + (f" ({hint})" if hint else "") + "."
    )


def _sqlite_settings(engine: sa.engine.Engine) -> None:
    """WAL, foreign keys, and BEGIN IMMEDIATE for writes (see the module docstring)."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver must not open transactions by itself: _begin below does.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")  # durable enough in WAL, much faster
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: sa.engine.Connection) -> None:
        read_only = connection.get_execution_options().get(READ_ONLY, False)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def _server_settings(engine: sa.engine.Engine) -> None:
    """Write transactions one at a time on a server, as on SQLite (see the module
    docstring): each begins by locking the one row of ``alembic_version`` (held until it
    commits or rolls back), so that the store's get-or-create writes (types, the pipeline's
    context, a shared data artifact) never race another launcher's into a duplicate key.
    Reads take no lock."""

    @event.listens_for(engine, "begin")
    def _begin(connection: sa.engine.Connection) -> None:
        if not connection.get_execution_options().get(READ_ONLY, False):
            connection.exec_driver_sql("SELECT version_num FROM alembic_version FOR UPDATE")


def _create_engine(url: str) -> sa.engine.Engine:
    try:
        parsed = sa.engine.make_url(url)
    except exc.ArgumentError as e:
        raise PipelineError(
            f"--metadata_url {mask(url)!r} is not a database URL; pass a SQLAlchemy URL such as "
            "sqlite:////path/to/metadata.sqlite or postgresql://user@host/db."
        ) from e
    parsed = _with_default_driver(parsed)
    sqlite = parsed.get_backend_name() == "sqlite"
    if sqlite and parsed.database in (None, "", ":memory:"):
        raise PipelineError(
            f"--metadata_url {mask(url)!r} names no SQLite file (an in-memory store would be lost "
            "when the run ends); pass sqlite:////path/to/metadata.sqlite."
        )
    parsed, connect_args = _pg8000_tls(parsed)
    if sqlite:
        connect_args["timeout"] = BUSY_TIMEOUT_S
    options = {}
    if parsed.get_backend_name() in ("mysql", "mariadb"):
        # MySQL's default (REPEATABLE READ) reads one snapshot for a whole transaction: a
        # launcher waiting on another's progress (a resume, the tuner's shared state)
        # would never see it. PostgreSQL's default, READ COMMITTED, is what the store
        # expects; its writes are serialised by the row lock of _server_settings.
        options["isolation_level"] = "READ COMMITTED"
    try:
        engine = sa.create_engine(parsed, connect_args=connect_args, **options)
    except (exc.NoSuchModuleError, ImportError) as e:
        missing = getattr(e, "name", None) or str(e)
        raise PipelineError(
            f"--metadata_url {_shown(parsed)} needs a database driver that is not installed "
            f"({missing}); pip install it, or use a driver installed with beam-pipeline: "
            "postgresql+pg8000:// or postgresql:// for PostgreSQL, mysql+pymysql:// or "
            "mysql:// for MySQL and MariaDB."
        ) from e
    if sqlite:
        _sqlite_settings(engine)
    return engine


def _reason(e: BaseException) -> str:
    """The driver's own first line, without SQLAlchemy's wrapping."""
    original = getattr(e, "orig", None) or e
    return (str(original).strip().splitlines() or [type(original).__name__])[0]


def _open_error(url: sa.engine.URL, e: exc.DBAPIError) -> PipelineError:
    reason = _reason(e)
    shown = _shown(url)
    if url.get_backend_name() == "sqlite":
        path = url.database or ""
        if "not a database" in reason or "malformed" in reason:
            return PipelineError(
                f"Metadata store {shown}: {path} is not a SQLite database or is corrupt "
                f"({reason}); move the file away (a new store is created in its place) or "
                "pass another --metadata_url."
            )
        return PipelineError(
            f"Metadata store {shown}: cannot open or write the SQLite file {path} "
            f"({reason}); make sure its folder {os.path.dirname(path) or '.'} exists and is "
            "writable, or pass another --metadata_url."
        )
    return PipelineError(f"Metadata store {shown} cannot be reached ({reason}); {_FIX}.")


_RESUME = "then run the same command again with the same --run_id to resume the run"


def write_error(url: sa.engine.URL, e: exc.DBAPIError) -> Optional[PipelineError]:
    """A store that failed after it opened (its disk full, its server gone), as one
    sentence naming the store (masked) and the fix; None for an error of the store's own
    queries (a constraint, a malformed statement: a defect, kept as it is)."""
    if isinstance(e, (exc.IntegrityError, exc.ProgrammingError)):
        return None
    reason, shown = _reason(e), _shown(url)
    if url.get_backend_name() != "sqlite":
        return PipelineError(
            f"Metadata store {shown} stopped answering during the run ({reason}); make sure "
            f"the server is up and reachable, {_RESUME}."
        )
    folder = os.path.dirname(url.database or "") or "."
    if no_room(e):
        return PipelineError(
            f"Metadata store {shown}: the disk holding {folder} is full ({reason}); free "
            f"space there, {_RESUME}."
        )
    return PipelineError(
        f"Metadata store {shown}: writing the SQLite file {url.database} failed ({reason}); "
        f"make sure its folder {folder} is writable and has free space, {_RESUME}."
    )


def _script() -> ScriptDirectory:
    return ScriptDirectory(MIGRATIONS)


def migrate(connection: sa.engine.Connection, revision: str = "head") -> None:
    """Runs the migrations on ``connection`` (in its transaction) up to ``revision``."""
    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


def _check_and_migrate(connection: sa.engine.Connection, shown: str) -> None:
    script = _script()
    current = MigrationContext.configure(connection).get_current_revision()
    if current is None:
        foreign = set(sa.inspect(connection).get_table_names()) - {"alembic_version"}
        if foreign:
            raise PipelineError(
                f"Metadata store {shown} holds other tables ({', '.join(sorted(foreign)[:3])}) "
                "and no beam-pipeline schema; pass the URL of an empty database or of a "
                "beam-pipeline store with --metadata_url."
            )
    elif current not in {r.revision for r in script.walk_revisions()}:
        raise PipelineError(
            f"Metadata store {shown} was written by a newer beam-pipeline (schema revision "
            f"{current}; this version knows up to {script.get_current_head()}); upgrade "
            "beam-pipeline, or pass another --metadata_url."
        )
    if current != script.get_current_head():
        migrate(connection)


# The server-side lock that serialises the schema's check and migrations between launchers
# (a constant: every beam-pipeline process must take the same one).
_SCHEMA_LOCK_KEY = 0x6265616D_6D657461  # b"beammeta"
_SCHEMA_LOCK_NAME = "beam_pipeline.metadata.schema"


@contextlib.contextmanager
def _schema_lock(connection: sa.engine.Connection, shown: str) -> Iterator[None]:
    """Holds a lock on the server while the schema is checked and migrated, so that
    launchers opening a new store at once create its tables once: the others wait, then
    find the newest revision. SQLite needs none (its ``BEGIN IMMEDIATE`` is the lock);
    PostgreSQL takes a session advisory lock, MySQL/MariaDB a named lock (``GET_LOCK``:
    their DDL commits by itself, so the transaction alone cannot serialise it). Both are
    session locks, released here or when a killed launcher's connection closes."""
    backend = connection.dialect.name
    if backend == "postgresql":
        connection.exec_driver_sql(f"SELECT pg_advisory_lock({_SCHEMA_LOCK_KEY})")
        unlock = f"SELECT pg_advisory_unlock({_SCHEMA_LOCK_KEY})"
    elif backend in ("mysql", "mariadb"):
        got = connection.exec_driver_sql(
            f"SELECT GET_LOCK('{_SCHEMA_LOCK_NAME}', {int(BUSY_TIMEOUT_S)})"
        ).scalar()
        if got != 1:
            raise PipelineError(
                f"Metadata store {shown}: another process held the lock on its schema for "
                f"{BUSY_TIMEOUT_S:.0f} s (a launcher creating or upgrading it); retry, or "
                "find that process with SHOW PROCESSLIST."
            )
        unlock = f"SELECT RELEASE_LOCK('{_SCHEMA_LOCK_NAME}')"
    else:
        yield
        return
    connection.commit()  # the lock outlives this transaction; the migrations get their own
    try:
        yield
    finally:
        connection.exec_driver_sql(unlock)
        connection.commit()


def open_engine(url: str) -> sa.engine.Engine:
    """An engine on the store at ``url``, its schema created or upgraded to the newest.

    Raises:
      PipelineError: the URL cannot be used (see the module docstring); one sentence
        naming the URL (without its password) and the fix.
    """
    engine = _create_engine(url)
    shown = _shown(engine.url)
    try:
        with engine.connect() as connection, _schema_lock(connection, shown):
            with connection.begin():
                _check_and_migrate(connection, shown)
    except exc.DBAPIError as e:
        engine.dispose()
        raise _open_error(engine.url, e) from e
    except ssl.SSLError as e:  # pg8000 raises TLS failures as they are
        engine.dispose()
        fix = (
            "pass the authority that signed the server's certificate with "
            "?sslrootcert=FILE, or use sslmode=require (encrypted, not verified)"
            if isinstance(e, ssl.SSLCertVerificationError)
            else _FIX
        )
        raise PipelineError(
            f"Metadata store {shown} cannot be reached over TLS ({_reason(e)}); {fix}."
        ) from e
    except TypeError as e:  # a query parameter the driver's connect() does not take
        engine.dispose()
        error = _option_error(engine.url, e)
        if error is None:
            raise
        raise error from e
    except BaseException:
        engine.dispose()
        raise
    if engine.dialect.name != "sqlite":
        _server_settings(engine)
    return engine
