"""Runs are keyed by pipeline name: a team store holds many pipelines, and run ids are
unique within one only. Before this revision every run was recorded under one pipeline
context, ``beam-pipeline``, its context named by its run id alone. Each run recorded
before is moved under the pipeline named after its pipeline root, as a run is named now
when ``--pipeline_name`` is not given (the root's absolute path: the folder its own
artifacts lie in, ``<root>/runs/<run id>/...``). A run without artifacts takes the root of
the default store's folder where that folder holds its run directory, else the one root
the store's other runs have; where none can be told, it stays under ``beam-pipeline``
(``runs --pipeline_name=beam-pipeline`` shows it). Each run context is renamed as
:func:`beam_pipeline.metadata.records.run_context_name` names it (frozen here) and keeps
its run id in its properties. No column changes.

Revision ID: 0005
Revises: 0004
"""

import hashlib
import os
import time
from typing import Optional

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_OLD_PIPELINE = "beam-pipeline"
_MAX_NAME = 255
_TYPES = sa.table("types", sa.column("id"), sa.column("kind"), sa.column("name"))
_CONTEXTS = sa.table(
    "contexts",
    sa.column("id"),
    sa.column("type_id"),
    sa.column("name"),
    sa.column("properties", sa.JSON),
    sa.column("create_time_ms"),
    sa.column("update_time_ms"),
)
_PARENTS = sa.table("parent_contexts", sa.column("context_id"), sa.column("parent_context_id"))
_ATTRIBUTIONS = sa.table("attributions", sa.column("context_id"), sa.column("artifact_id"))
_ARTIFACTS = sa.table("artifacts", sa.column("id"), sa.column("uri"))


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _pipeline_name(root: str) -> str:
    """As ``records.pipeline_name_for`` names an absolute root (frozen)."""
    name = root.rstrip("/") or "/"
    if len(name) <= _MAX_NAME:
        return name
    digest = _digest(name)
    return f"{digest}-{name[-(_MAX_NAME - len(digest) - 1) :]}"


def _root_of(uris: list[str], run_id: str) -> Optional[str]:
    """The pipeline root of a run's own artifacts: what precedes ``/runs/<run id>``."""
    for marker in (f"/runs/{run_id}/", f"/runs/{run_id}"):
        for uri in sorted(uris):
            at = uri.find(marker)
            if at > 0 and (marker.endswith("/") or uri.endswith(marker)):
                return uri[:at]
    return None


def _type_id(conn: sa.Connection, name: str) -> Optional[int]:
    query = sa.select(_TYPES.c.id).where(_TYPES.c.kind == "context", _TYPES.c.name == name)
    return conn.execute(query).scalar()


def _pipeline_context(conn: sa.Connection, type_id: int, name: str) -> int:
    """The id of pipeline context ``name``, created if missing."""
    query = sa.select(_CONTEXTS.c.id).where(
        _CONTEXTS.c.type_id == type_id, _CONTEXTS.c.name == name
    )
    found = conn.execute(query).scalar()
    if found is None:
        now = int(time.time() * 1000)
        conn.execute(
            sa.insert(_CONTEXTS).values(
                type_id=type_id, name=name, properties={}, create_time_ms=now, update_time_ms=now
            )
        )
        found = conn.execute(query).scalar()
    return found


def upgrade() -> None:
    conn = op.get_bind()
    run_type = _type_id(conn, "run")
    pipeline_type = _type_id(conn, "pipeline")
    if run_type is None or pipeline_type is None:
        return  # no run recorded
    runs = conn.execute(
        sa.select(_CONTEXTS.c.id, _CONTEXTS.c.name, _CONTEXTS.c.properties).where(
            _CONTEXTS.c.type_id == run_type
        )
    ).fetchall()
    runs = [r for r in runs if not (isinstance(r.properties, dict) and "run_id" in r.properties)]
    if not runs:
        return
    uris: dict[int, list[str]] = {r.id: [] for r in runs}
    for context_id, uri in conn.execute(
        sa.select(_ATTRIBUTIONS.c.context_id, _ARTIFACTS.c.uri).join(
            _ARTIFACTS, _ARTIFACTS.c.id == _ATTRIBUTIONS.c.artifact_id
        )
    ):
        if context_id in uris:
            uris[context_id].append(uri)
    roots = {r.id: _root_of(uris[r.id], r.name) for r in runs}
    found = {root for root in roots.values() if root}
    # The default store lies in its pipeline root, beside the run directories.
    folder = None
    if conn.dialect.name == "sqlite" and conn.engine.url.database:
        folder = os.path.dirname(os.path.abspath(conn.engine.url.database))
    for run in runs:
        if (
            roots[run.id] is None
            and folder
            and os.path.isdir(os.path.join(folder, "runs", run.name))
        ):
            roots[run.id] = folder
        elif roots[run.id] is None and len(found) == 1:
            roots[run.id] = next(iter(found))
    parents: dict[str, int] = {}
    for run in runs:
        root = roots[run.id]
        pipeline = _pipeline_name(root) if root else _OLD_PIPELINE
        if pipeline not in parents:
            parents[pipeline] = _pipeline_context(conn, pipeline_type, pipeline)
        conn.execute(sa.delete(_PARENTS).where(_PARENTS.c.context_id == run.id))
        conn.execute(
            sa.insert(_PARENTS).values(context_id=run.id, parent_context_id=parents[pipeline])
        )
        properties = dict(run.properties) if isinstance(run.properties, dict) else {}
        conn.execute(
            sa.update(_CONTEXTS)
            .where(_CONTEXTS.c.id == run.id)
            .values(
                name=f"{_digest(pipeline)}:{run.name}",
                properties={**properties, "run_id": run.name},
            )
        )
