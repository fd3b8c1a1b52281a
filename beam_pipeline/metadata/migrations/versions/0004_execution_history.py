"""Executions get what their stage shows in the run history: a ``history`` property (a
:class:`~beam_pipeline.engine.history_entry.HistoryEntry` as JSON), which the runner now
records from each stage's declaration, and runs the ``runs list`` columns their graph
declared (``history_columns``); the ``runs`` commands draw them without naming any stage.
Executions and runs recorded before get theirs here, from their summary rows, by the rules
the ``runs`` commands read them with until this revision (frozen here: a migration must
turn the same rows into the same values whatever the stages say later; every run then
listed a model's metrics, whether it was blessed and pushed). No column changes: the
store's schema is that of 0003; the revision is raised so that an older beam-pipeline,
which would record executions without it, refuses the store.

Revision ID: 0004
Revises: 0003
"""

from collections.abc import Sequence
from typing import Any, Optional

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_TYPES = sa.table("types", sa.column("id"), sa.column("kind"), sa.column("name"))
_CONTEXTS = sa.table(
    "contexts", sa.column("id"), sa.column("type_id"), sa.column("properties", sa.JSON)
)
_EXECUTIONS = sa.table(
    "executions", sa.column("id"), sa.column("type_id"), sa.column("properties", sa.JSON)
)
# The summary row each stage's history was read from (the data stage's first row).
_ROW = {"ExampleGen+Statistics": "ExampleGen"}
# The columns every run listed, with their values where its stages recorded none.
_COLUMNS = {"metrics": {}, "blessed": None, "pushed": None}


def _span_label(spans: Sequence[int]) -> str:
    """'span 3', 'spans 1-3', or 'spans 1, 3' (as the data stage words them)."""
    spans = sorted(spans)
    if len(spans) == 1:
        return f"span {spans[0]}"
    if spans == list(range(spans[0], spans[-1] + 1)):
        return f"spans {spans[0]}-{spans[-1]}"
    return "spans " + ", ".join(str(s) for s in spans)


def _verdict(details: dict[str, Any], *also: str) -> dict[str, Any]:
    found = {"blessed": details.get("blessed"), "failures": list(details.get("failures") or [])}
    found.update({name: details.get(name) for name in also})
    return found


def history(stage: str, reports: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What an execution of ``stage`` with the summary rows ``reports`` showed in the run
    history before this revision, as a ``history`` property."""
    row = next((r for r in reports if r.get("stage") == _ROW.get(stage, stage)), None)
    if row is None:
        return {}
    details = row.get("details") or {}
    result = row.get("status") in ("ok", "cached")  # what a stage that ran to a result says
    if stage == "Trainer":
        metrics = dict(details.get("metrics") or {}) if result else {}
        return {"columns": {"metrics": metrics}, "compared": {"metrics": metrics}}
    if stage == "Tuner":
        best = dict(details.get("best_hyperparameters") or {}) if result else {}
        return {"compared": {"hyperparameters": best}}
    if stage == "Evaluator":
        found = _verdict(details)
        return {"columns": {"blessed": found["blessed"]}, "verdict": found}
    if stage == "InfraValidator":
        return {"verdict": _verdict(details)}
    if stage == "Pusher":
        found = _verdict(details, "pushed")
        return {"columns": {"pushed": found["pushed"]}, "verdict": found}
    if stage == "ExampleGen+Statistics" and details.get("spans"):
        spans, reused = details["spans"], details.get("spans_reused") or []
        line = f"Data: {_span_label(spans)}" + (
            f" ({_span_label(reused)} reused from earlier runs, not read)" if reused else ""
        )
        return {"facts": {"spans": spans, "spans_reused": reused}, "lines": [line]}
    return {}


def _with_history(stage: str, properties: Any) -> Optional[dict[str, Any]]:
    """The execution's properties with its history, or None where nothing changes."""
    if not isinstance(properties, dict) or "history" in properties:
        return None
    found = history(stage, properties.get("reports") or [])
    return {**properties, "history": found} if found else None


def upgrade() -> None:
    conn = op.get_bind()
    runs = sa.select(_CONTEXTS.c.id, _CONTEXTS.c.properties).join(
        _TYPES, _TYPES.c.id == _CONTEXTS.c.type_id
    )
    runs = runs.where(_TYPES.c.kind == "context", _TYPES.c.name == "run")
    for context_id, kept in conn.execute(runs).fetchall():
        own = kept.get("properties") if isinstance(kept, dict) else None
        if isinstance(own, dict) and "history_columns" not in own:
            changed = {**kept, "properties": {**own, "history_columns": _COLUMNS}}
            conn.execute(
                sa.update(_CONTEXTS).where(_CONTEXTS.c.id == context_id).values(properties=changed)
            )
    query = sa.select(_EXECUTIONS.c.id, _TYPES.c.name, _EXECUTIONS.c.properties).join(
        _TYPES, _TYPES.c.id == _EXECUTIONS.c.type_id
    )
    for execution_id, stage, properties in conn.execute(query).fetchall():
        changed = _with_history(stage, properties)
        if changed is not None:
            conn.execute(
                sa.update(_EXECUTIONS)
                .where(_EXECUTIONS.c.id == execution_id)
                .values(properties=changed)
            )
