"""The store's row-level writes inside one transaction (what ``MetadataStore`` composes).

Example::

    with engine.begin() as conn:
        rows = Rows(conn, type_ids)
        execution_id = rows.new_execution(run, "Schema", {}, key, ExecutionStatus.RUNNING)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

import sqlalchemy as sa

import beam_pipeline.metadata.schema as s
from beam_pipeline.metadata.records import (
    ArtifactRecord,
    ArtifactSpec,
    ArtifactState,
    EventType,
    ExecutionRef,
    ExecutionStatus,
    RunRef,
    RunStatus,
    TypeKind,
)

__all__ = ["Input", "Rows", "now_ms", "to_json"]

Input = Union[ArtifactRecord, ArtifactSpec]


def now_ms() -> int:
    return int(time.time() * 1000)


def to_json(value: Any) -> str:
    """A value as stored in a property: canonical JSON text (``true`` compares as text)."""
    return json.dumps(value, sort_keys=True)


class Rows:
    """Writes rows on ``conn`` (in its transaction).

    Args:
      type_ids: the store's memo of type ids by (kind, name); only ids read back from the
        database go in (one inserted here could still be rolled back).
    """

    def __init__(self, conn: sa.Connection, type_ids: dict[tuple[TypeKind, str], int]):
        self.conn = conn
        self._type_ids = type_ids

    def type_id(self, kind: TypeKind, name: str) -> int:
        key = (kind, name)
        if key not in self._type_ids:
            found = self.conn.execute(
                sa.select(s.types.c.id).where(s.types.c.kind == kind.value, s.types.c.name == name)
            ).scalar()
            if found is None:
                insert = sa.insert(s.types).values(kind=kind.value, name=name)
                return self.conn.execute(insert).inserted_primary_key[0]
            self._type_ids[key] = found
        return self._type_ids[key]

    # Contexts -------------------------------------------------------------------------

    def context(self, type_name: str, name: str) -> Optional[Any]:
        type_id = self.type_id(TypeKind.CONTEXT, type_name)
        return self.conn.execute(
            sa.select(s.contexts).where(s.contexts.c.type_id == type_id, s.contexts.c.name == name)
        ).first()

    def new_context(self, type_name: str, name: str, props: dict) -> int:
        now = now_ms()
        return self.conn.execute(
            sa.insert(s.contexts).values(
                type_id=self.type_id(TypeKind.CONTEXT, type_name),
                name=name,
                properties=props,
                create_time_ms=now,
                update_time_ms=now,
            )
        ).inserted_primary_key[0]

    def update_run(
        self,
        context_id: int,
        status: RunStatus,
        properties: Optional[Mapping[str, Any]],
        end_ms: Optional[int] = None,
    ) -> None:
        """A run's status, end and properties (merged into those recorded before)."""
        old = self.conn.execute(
            sa.select(s.contexts.c.properties).where(s.contexts.c.id == context_id)
        ).scalar_one()
        props = {
            **old,  # the run's id
            "status": status.value,
            "end_time_ms": end_ms,
            "properties": {**old.get("properties", {}), **(properties or {})},
        }
        self.conn.execute(
            sa.update(s.contexts)
            .where(s.contexts.c.id == context_id)
            .values(properties=props, update_time_ms=now_ms())
        )

    # Artifacts ------------------------------------------------------------------------

    def set_properties(self, artifact_id: int, props: Mapping[str, Any], custom: bool) -> None:
        table = s.artifact_properties
        if not props:
            return
        self.conn.execute(
            sa.delete(table).where(
                table.c.artifact_id == artifact_id,
                table.c.is_custom == custom,
                table.c.name.in_(list(props)),
            )
        )
        self.conn.execute(
            sa.insert(table),
            [
                {"artifact_id": artifact_id, "name": n, "is_custom": custom, "value": to_json(v)}
                for n, v in props.items()
            ],
        )

    def new_artifact(self, spec: ArtifactSpec, state: ArtifactState, run: RunRef) -> int:
        now = now_ms()
        artifact_id = self.conn.execute(
            sa.insert(s.artifacts).values(
                type_id=self.type_id(TypeKind.ARTIFACT, spec.type_name),
                uri=spec.uri,
                state=state.value,
                fingerprint=spec.fingerprint,
                create_time_ms=now,
                update_time_ms=now,
            )
        ).inserted_primary_key[0]
        self.set_properties(artifact_id, spec.properties, custom=False)
        self.attribute(run, [artifact_id])
        if state is ArtifactState.PUBLISHED:
            self.supersede(spec.uri, artifact_id)
        return artifact_id

    def supersede(self, uri: str, artifact_id: int) -> None:
        """Artifact ``artifact_id`` is now what ``uri`` holds: the artifacts published
        there before (a rerun stage's earlier output, data changed in place) are deleted."""
        a = s.artifacts
        self.conn.execute(
            sa.update(a)
            .where(
                a.c.uri == uri,
                a.c.state == ArtifactState.PUBLISHED.value,
                a.c.id != artifact_id,
            )
            .values(state=ArtifactState.DELETED.value, update_time_ms=now_ms())
        )

    def set_state(self, artifact_ids: Iterable[int], state: ArtifactState, **more: Any) -> None:
        ids = list(artifact_ids)
        if ids:
            self.conn.execute(
                sa.update(s.artifacts)
                .where(s.artifacts.c.id.in_(ids))
                .values(state=state.value, update_time_ms=now_ms(), **more)
            )

    def attribute(self, run: RunRef, artifact_ids: Iterable[int]) -> None:
        """Attributes the artifacts to the run (once each)."""
        known = self.conn.execute(
            sa.select(s.attributions.c.artifact_id).where(
                s.attributions.c.context_id == run.context_id
            )
        ).scalars()
        ids = set(artifact_ids) - set(known)
        if ids:
            rows = [{"context_id": run.context_id, "artifact_id": i} for i in sorted(ids)]
            self.conn.execute(sa.insert(s.attributions), rows)

    def input_id(self, item: Input, run: RunRef) -> int:
        """An input's artifact id; an external input (the data) is registered once per
        uri, type and fingerprint, as published."""
        if isinstance(item, ArtifactRecord):
            return item.id
        a = s.artifacts
        found = self.conn.execute(
            sa.select(a.c.id)
            .where(
                a.c.type_id == self.type_id(TypeKind.ARTIFACT, item.type_name),
                a.c.uri == item.uri,
                a.c.state == ArtifactState.PUBLISHED.value,
                a.c.fingerprint.is_(None)
                if item.fingerprint is None
                else a.c.fingerprint == item.fingerprint,
            )
            .order_by(a.c.id.desc())
        ).scalar()
        if found is None:
            return self.new_artifact(item, ArtifactState.PUBLISHED, run)
        self.attribute(run, [found])
        return found

    # Executions and events ------------------------------------------------------------

    def events(self, execution_id: int, kind: EventType, ids: Mapping[str, int]) -> None:
        """Links the execution to artifacts ``ids`` (by role name)."""
        if ids:
            now = now_ms()
            rows = [
                {
                    "execution_id": execution_id,
                    "artifact_id": artifact_id,
                    "type": kind.value,
                    "role": role,
                    "time_ms": now,
                }
                for role, artifact_id in ids.items()
            ]
            self.conn.execute(sa.insert(s.events), rows)

    def new_execution(
        self,
        run: RunRef,
        stage: str,
        parameters: Mapping[str, Any],
        cache_key: Optional[str],
        status: ExecutionStatus,
        **more: Any,
    ) -> int:
        execution_id = self.conn.execute(
            sa.insert(s.executions).values(
                type_id=self.type_id(TypeKind.EXECUTION, stage),
                status=status.value,
                cache_key=cache_key,
                parameters=json.loads(to_json(parameters)),  # not JSON: fails here
                start_time_ms=now_ms(),
                **more,
            )
        ).inserted_primary_key[0]
        self.conn.execute(
            sa.insert(s.associations).values(context_id=run.context_id, execution_id=execution_id)
        )
        return execution_id

    def abandon_running(self, context_id: int, error: str) -> list[int]:
        """Records the run's executions still ``running`` as ``abandoned`` with ``error``
        (their pending outputs deleted); returns their ids."""
        ids = list(
            self.conn.execute(
                sa.select(s.executions.c.id)
                .join(s.associations, s.associations.c.execution_id == s.executions.c.id)
                .where(
                    s.associations.c.context_id == context_id,
                    s.executions.c.status == ExecutionStatus.RUNNING.value,
                )
            ).scalars()
        )
        for execution_id in ids:
            self.stop(execution_id, ExecutionStatus.ABANDONED, error=error)
        return ids

    def outputs(self, execution_id: int) -> dict[str, Any]:
        """The execution's output artifacts' rows, by role name."""
        return {
            row.role: row
            for row in self.conn.execute(
                sa.select(s.events.c.role, s.artifacts)
                .join(s.artifacts, s.artifacts.c.id == s.events.c.artifact_id)
                .where(
                    s.events.c.execution_id == execution_id,
                    s.events.c.type == EventType.OUTPUT.value,
                )
            )
        }

    def check_running(self, execution: ExecutionRef) -> None:
        status = self.conn.execute(
            sa.select(s.executions.c.status).where(s.executions.c.id == execution.id)
        ).scalar_one()
        if status != ExecutionStatus.RUNNING.value:
            raise ValueError(f"execution {execution.id} of {execution.stage} is {status}")

    def append_jobs(self, execution: ExecutionRef, job_ids: Sequence[str]) -> None:
        if not job_ids:
            return
        old = self.conn.execute(
            sa.select(s.executions.c.beam_job_ids).where(s.executions.c.id == execution.id)
        ).scalar_one()
        self.conn.execute(
            sa.update(s.executions)
            .where(s.executions.c.id == execution.id)
            .values(beam_job_ids=list(old or []) + list(job_ids))
        )

    def update_properties(self, execution: ExecutionRef, props: Mapping[str, Any]) -> None:
        """Merges ``props`` into the execution's properties."""
        if not props:
            return
        old = self.conn.execute(
            sa.select(s.executions.c.properties).where(s.executions.c.id == execution.id)
        ).scalar_one()
        self.conn.execute(
            sa.update(s.executions)
            .where(s.executions.c.id == execution.id)
            .values(properties={**(old or {}), **json.loads(to_json(props))})
        )

    def end(self, execution_id: int, status: ExecutionStatus, **more: Any) -> None:
        self.conn.execute(
            sa.update(s.executions)
            .where(s.executions.c.id == execution_id)
            .values(status=status.value, end_time_ms=now_ms(), **more)
        )

    def stop(self, execution_id: int, status: ExecutionStatus, **more: Any) -> None:
        """Ends an execution without a result; its pending outputs become deleted."""
        self.end(execution_id, status, **more)
        pending = [
            row.id
            for row in self.outputs(execution_id).values()
            if row.state == ArtifactState.PENDING.value
        ]
        self.set_state(pending, ArtifactState.DELETED)
