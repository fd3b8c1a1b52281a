"""Reading the store: artifacts and executions as records, the run history, lineage.

Each function takes an open connection (a read transaction) and runs a handful of queries
whatever the number of rows: rows are fetched by ``IN`` lists of ids, not one query per
row. :class:`~beam_pipeline.metadata.store.MetadataStore` wraps them in its methods.

Example::

    with engine.connect() as connection:
        runs = list_runs(connection)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Optional

import sqlalchemy as sa

import beam_pipeline.metadata.schema as s
from beam_pipeline.metadata.records import (
    PIPELINE_CONTEXT,
    RUN_CONTEXT,
    ArtifactRecord,
    ArtifactState,
    EventType,
    ExecutionRecord,
    ExecutionStatus,
    Lineage,
    RunRecord,
    RunStatus,
    TypeKind,
    from_ms,
    run_context_name,
)

__all__ = [
    "lineage",
    "list_runs",
    "load_artifacts",
    "load_executions",
    "pipeline_artifacts",
    "pipeline_executions",
    "run_execution_ids",
]

_CHUNK = 500  # ids per IN list: under every database's limit on bound parameters


def _chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    ids = sorted(set(ids))
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


def load_artifacts(conn: sa.Connection, ids: Iterable[int]) -> dict[int, ArtifactRecord]:
    """The artifacts with these ids, with their properties, by id."""
    rows, props = [], {}
    for chunk in _chunks(ids):
        rows += conn.execute(
            sa.select(s.artifacts, s.types.c.name.label("type_name"))
            .join(s.types, s.types.c.id == s.artifacts.c.type_id)
            .where(s.artifacts.c.id.in_(chunk))
        ).all()
        for p in conn.execute(
            sa.select(s.artifact_properties).where(s.artifact_properties.c.artifact_id.in_(chunk))
        ):
            custom = props.setdefault(p.artifact_id, ({}, {}))[1 if p.is_custom else 0]
            custom[p.name] = json.loads(p.value)
    return {
        r.id: ArtifactRecord(
            id=r.id,
            type_name=r.type_name,
            uri=r.uri,
            state=ArtifactState(r.state),
            fingerprint=r.fingerprint,
            properties=props.get(r.id, ({}, {}))[0],
            custom_properties=props.get(r.id, ({}, {}))[1],
            create_time=from_ms(r.create_time_ms),
        )
        for r in rows
    }


def _run_names(conn: sa.Connection, execution_ids: Sequence[int]) -> dict[int, str]:
    """The run (its id) each execution belongs to."""
    out = {}
    run_type = sa.select(s.types.c.id).where(
        s.types.c.kind == TypeKind.CONTEXT.value, s.types.c.name == RUN_CONTEXT
    )
    for chunk in _chunks(execution_ids):
        for row in conn.execute(
            sa.select(s.associations.c.execution_id, s.contexts.c.properties)
            .join(s.contexts, s.contexts.c.id == s.associations.c.context_id)
            .where(
                s.associations.c.execution_id.in_(chunk),
                s.contexts.c.type_id.in_(run_type.scalar_subquery()),
            )
        ):
            out[row.execution_id] = row.properties["run_id"]
    return out


def load_executions(conn: sa.Connection, ids: Iterable[int]) -> list[ExecutionRecord]:
    """The executions with these ids, in the order they began, with inputs and outputs."""
    rows, events = [], []
    for chunk in _chunks(ids):
        rows += conn.execute(
            sa.select(s.executions, s.types.c.name.label("stage"))
            .join(s.types, s.types.c.id == s.executions.c.type_id)
            .where(s.executions.c.id.in_(chunk))
        ).all()
        events += conn.execute(
            sa.select(s.events).where(s.events.c.execution_id.in_(chunk)).order_by(s.events.c.id)
        ).all()
    artifacts = load_artifacts(conn, (e.artifact_id for e in events))
    runs = _run_names(conn, [r.id for r in rows])
    linked: dict[int, tuple[dict, dict]] = {r.id: ({}, {}) for r in rows}
    for e in events:
        side = 0 if e.type == EventType.INPUT.value else 1
        linked[e.execution_id][side][e.role] = artifacts[e.artifact_id]
    return [
        ExecutionRecord(
            id=r.id,
            stage=r.stage,
            run_id=runs.get(r.id),
            status=ExecutionStatus(r.status),
            cache_key=r.cache_key,
            parameters=r.parameters,
            start_time=from_ms(r.start_time_ms),
            end_time=from_ms(r.end_time_ms),
            beam_job_ids=tuple(r.beam_job_ids or ()),
            error=r.error,
            cached_from=r.cached_from_id,
            properties=r.properties,
            inputs=linked[r.id][0],
            outputs=linked[r.id][1],
        )
        for r in sorted(rows, key=lambda r: r.id)
    ]


def _context_type_id(conn: sa.Connection, name: str) -> Optional[int]:
    return conn.execute(
        sa.select(s.types.c.id).where(
            s.types.c.kind == TypeKind.CONTEXT.value, s.types.c.name == name
        )
    ).scalar()


def _pipeline_runs(pipeline: str) -> sa.Select:
    """The ids of the run contexts of ``pipeline`` (a subquery)."""
    parent = s.contexts.alias("pipeline_context")
    pipeline_type = sa.select(s.types.c.id).where(
        s.types.c.kind == TypeKind.CONTEXT.value, s.types.c.name == PIPELINE_CONTEXT
    )
    return (
        sa.select(s.parent_contexts.c.context_id)
        .join(parent, parent.c.id == s.parent_contexts.c.parent_context_id)
        .where(parent.c.name == pipeline, parent.c.type_id.in_(pipeline_type.scalar_subquery()))
    )


def pipeline_executions(pipeline: str) -> sa.Select:
    """The ids of the executions recorded in runs of ``pipeline`` (a subquery)."""
    return sa.select(s.associations.c.execution_id).where(
        s.associations.c.context_id.in_(_pipeline_runs(pipeline))
    )


def pipeline_artifacts(pipeline: str) -> sa.Select:
    """The ids of the artifacts attributed to runs of ``pipeline`` (a subquery)."""
    return sa.select(s.attributions.c.artifact_id).where(
        s.attributions.c.context_id.in_(_pipeline_runs(pipeline))
    )


def list_runs(conn: sa.Connection, pipeline: Optional[str] = None) -> list[RunRecord]:
    """Every run (of ``pipeline``, or of all pipelines), newest first."""
    run_type = _context_type_id(conn, RUN_CONTEXT)
    if run_type is None:
        return []
    parent = s.contexts.alias("parent")
    query = (
        sa.select(s.contexts, parent.c.name.label("pipeline"))
        .join(s.parent_contexts, s.parent_contexts.c.context_id == s.contexts.c.id)
        .join(parent, parent.c.id == s.parent_contexts.c.parent_context_id)
        .where(s.contexts.c.type_id == run_type)
        .order_by(s.contexts.c.create_time_ms.desc(), s.contexts.c.id.desc())
    )
    if pipeline is not None:
        query = query.where(parent.c.name == pipeline)
    runs = conn.execute(query).all()
    stages: dict[int, dict[str, ExecutionStatus]] = {r.id: {} for r in runs}
    for chunk in _chunks(stages):
        for row in conn.execute(
            sa.select(s.associations.c.context_id, s.types.c.name, s.executions.c.status)
            .join(s.executions, s.executions.c.id == s.associations.c.execution_id)
            .join(s.types, s.types.c.id == s.executions.c.type_id)
            .where(s.associations.c.context_id.in_(chunk))
            .order_by(s.executions.c.id)
        ):
            stages[row.context_id][row.name] = ExecutionStatus(row.status)  # latest wins
    return [
        RunRecord(
            run_id=r.properties["run_id"],
            pipeline=r.pipeline,
            status=RunStatus(r.properties["status"]),
            start_time=from_ms(r.create_time_ms),
            end_time=from_ms(r.properties.get("end_time_ms")),
            properties=r.properties.get("properties", {}),
            stages=stages[r.id],
        )
        for r in runs
    ]


def run_execution_ids(conn: sa.Connection, pipeline: str, run_id: str) -> Optional[list[int]]:
    """The ids of the executions of ``pipeline``'s run ``run_id`` in the order they began;
    None if no such run is recorded."""
    run_type = _context_type_id(conn, RUN_CONTEXT)
    context = conn.execute(
        sa.select(s.contexts.c.id).where(
            s.contexts.c.type_id == run_type,
            s.contexts.c.name == run_context_name(pipeline, run_id),
        )
    ).scalar()
    if context is None:
        return None
    return list(
        conn.execute(
            sa.select(s.associations.c.execution_id)
            .where(s.associations.c.context_id == context)
            .order_by(s.associations.c.execution_id)
        ).scalars()
    )


def _linked(
    conn: sa.Connection,
    ids: Iterable[int],
    event: EventType,
    from_artifacts: bool,
    pipeline: str,
    skip_cached: bool = False,
) -> set[int]:
    """Through the events of type ``event``: the executions of ``pipeline`` linked to
    artifacts ``ids`` (``from_artifacts``), or the artifacts linked to executions ``ids``."""
    by, other = (s.events.c.artifact_id, s.events.c.execution_id)
    if not from_artifacts:
        by, other = other, by
    found: set[int] = set()
    for chunk in _chunks(ids):
        query = (
            sa.select(other)
            .join(s.executions, s.executions.c.id == s.events.c.execution_id)
            .where(by.in_(chunk), s.events.c.type == event.value)
            .where(s.executions.c.id.in_(pipeline_executions(pipeline)))
        )
        if skip_cached:
            query = query.where(s.executions.c.status != ExecutionStatus.CACHED.value)
        found.update(conn.execute(query).scalars())
    return found


def _walk(conn: sa.Connection, start: int, upstream: bool, pipeline: str) -> set[int]:
    """The executions reached from artifact ``start``: upstream through its producers and
    their inputs, or downstream through its consumers and their outputs."""
    into, out_of = (
        (EventType.OUTPUT, EventType.INPUT) if upstream else (EventType.INPUT, EventType.OUTPUT)
    )
    executions: set[int] = set()
    frontier, seen = {start}, {start}
    while frontier:
        # Upstream, a CACHED execution is no producer: it reused what another one made.
        step = _linked(conn, frontier, into, True, pipeline, skip_cached=upstream)
        step -= executions
        executions |= step
        frontier = _linked(conn, step, out_of, False, pipeline) - seen
        seen |= frontier
    return executions


def lineage(conn: sa.Connection, uri: str, pipeline: str) -> Optional[Lineage]:
    """The lineage, within ``pipeline``'s runs, of the newest artifact of those runs stored
    at ``uri``; None if none is."""
    artifact_id = conn.execute(
        sa.select(sa.func.max(s.artifacts.c.id)).where(
            s.artifacts.c.uri == uri, s.artifacts.c.id.in_(pipeline_artifacts(pipeline))
        )
    ).scalar()
    if artifact_id is None:
        return None
    return Lineage(
        artifact=load_artifacts(conn, [artifact_id])[artifact_id],
        upstream=tuple(load_executions(conn, _walk(conn, artifact_id, True, pipeline))),
        downstream=tuple(load_executions(conn, _walk(conn, artifact_id, False, pipeline))),
    )
