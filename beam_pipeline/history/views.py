"""The metadata store's records as JSON values: one run's row, its executions, a lineage.

These are what ``runs ... --json`` prints and what the tables are drawn from, so a script
and a person see the same facts. What a stage adds to them (its ``runs list`` columns, its
lines and verdict in ``runs show``, its sections of ``runs diff``) is what it recorded
with its execution (:class:`beam_pipeline.engine.history_entry.HistoryEntry`): nothing
here names a stage.

Example::

    with MetadataStore.open(url) as store:
        rows = run_rows(store)            # [{"run_id": ..., "columns": {...}, ...}, ...]
        shown = run_view(store, "again")  # {"run_id": "again", "executions": [...]}
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.history_entry import HISTORY, HISTORY_COLUMNS
from beam_pipeline.metadata import (
    ArtifactRecord,
    ExecutionRecord,
    ExecutionStatus,
    Lineage,
    MetadataStore,
    RunRecord,
    RunStatus,
)
from beam_pipeline.metadata.launcher import launcher_gone

__all__ = [
    "artifact_view",
    "compared",
    "execution_view",
    "history_entries",
    "lineage_view",
    "made_by",
    "model_checks",
    "run_executions",
    "run_rows",
    "run_view",
]


def _time(t: Optional[datetime.datetime]) -> Optional[str]:
    return t.isoformat(timespec="seconds") if t is not None else None


def artifact_view(a: ArtifactRecord) -> dict[str, Any]:
    return {
        "id": a.id,
        "type": a.type_name,
        "uri": a.uri,
        "state": a.state.value,
        "fingerprint": a.fingerprint,
        "properties": dict(a.properties),
        "custom_properties": dict(a.custom_properties),
    }


def _execution_status(e: ExecutionRecord) -> str:
    """An execution's status as shown: ``skipped`` for a complete one whose summary rows
    all say the stage was skipped (``--no_tuner``: recorded complete, as its decision is
    what a resume reuses, but it did nothing)."""
    reports = e.properties.get("reports") or []
    if e.status is ExecutionStatus.COMPLETE and reports:
        if all(r.get("status") == "skipped" for r in reports):
            return "skipped"
    return e.status.value


def execution_view(e: ExecutionRecord, cached_from_run: Optional[str] = None) -> dict[str, Any]:
    return {
        "id": e.id,
        "stage": e.stage,
        "run_id": e.run_id,
        "status": _execution_status(e),
        "start": _time(e.start_time),
        "end": _time(e.end_time),
        "cache_key": e.cache_key,
        "cached_from": e.cached_from,
        "cached_from_run": cached_from_run,
        "parameters": dict(e.parameters),
        "job_ids": list(e.beam_job_ids),
        "error": e.error,
        "inputs": {role: artifact_view(a) for role, a in e.inputs.items()},
        "outputs": {role: artifact_view(a) for role, a in e.outputs.items()},
    }


def run_executions(store: MetadataStore, run_id: str) -> list[ExecutionRecord]:
    """Run ``run_id``'s executions.

    Raises:
      PipelineError: no such run is recorded.
    """
    found = store.run_executions(run_id)
    if found is None:
        raise PipelineError(
            f"No run {run_id!r} is recorded in the metadata store {store.url}; `runs list` "
            f"shows the run ids recorded for pipeline {store.pipeline} (check --pipeline_root, "
            "--pipeline_name and --metadata_url)."
        )
    return found


def made_by(store: MetadataStore, executions: list[ExecutionRecord]) -> dict[int, ExecutionRecord]:
    """For each ``CACHED`` execution's id, the execution that made what it reused (whose
    properties hold the stage's reports)."""
    wanted = {e.cached_from for e in executions if e.cached_from is not None}
    originals = {e.id: e for e in store.executions(wanted)}
    return {
        e.id: originals[e.cached_from]
        for e in executions
        if e.cached_from is not None and e.cached_from in originals
    }


def _latest(executions: list[ExecutionRecord]) -> dict[str, ExecutionRecord]:
    """Each stage's latest execution, the stages in the order they first ran."""
    return {e.stage: e for e in executions}


def history_entries(
    executions: list[ExecutionRecord], originals: Mapping[int, ExecutionRecord]
) -> list[tuple[ExecutionRecord, dict[str, Any]]]:
    """Each stage's latest execution in a run and what its stage recorded for the history
    (its own or, when cached, the execution's it reused), in the order they ran."""
    return [
        (e, dict(originals.get(e.id, e).properties.get(HISTORY) or {}))
        for e in _latest(executions).values()
    ]


def _merged(entries: list[tuple[ExecutionRecord, dict[str, Any]]], part: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for _, entry in entries:
        merged.update(entry.get(part) or {})
    return merged


def compared(
    executions: list[ExecutionRecord], originals: Mapping[int, ExecutionRecord]
) -> dict[str, dict[str, Any]]:
    """The sections ``runs diff`` compares, as the run's stages recorded them (a model's
    metrics, a search's best hyperparameters, ...), in the order they ran."""
    return _merged(history_entries(executions, originals), "compared")


def model_checks(
    executions: list[ExecutionRecord], originals: Mapping[int, ExecutionRecord]
) -> dict[str, dict[str, Any]]:
    """The model checks' verdicts in a run: for each stage that recorded a verdict, its
    status (as the run's summary says it), its first summary row's note (the verdict in
    words) and the verdict's keys (whether it blessed the model, the thresholds it missed:
    metric, slice, value, bound and by how much the value misses it, ...)."""
    checks: dict[str, dict[str, Any]] = {}
    for e, entry in history_entries(executions, originals):
        found = entry.get("verdict")
        if found is None:
            continue
        reports = originals.get(e.id, e).properties.get("reports") or [{}]
        status = reports[0].get("status")
        if e.status is ExecutionStatus.CACHED:
            status = _summary_status(e, originals.get(e.id))  # as the run's summary says
        checks[e.stage] = {"status": status, "note": reports[0].get("note", ""), **found}
    return checks


def _row(store: MetadataStore, run: RunRecord) -> dict[str, Any]:
    executions = store.run_executions(run.run_id) or []
    entries = history_entries(executions, made_by(store, executions))
    status = run.status.value
    if run.status is RunStatus.RUNNING and launcher_gone(run.properties.get("launcher")):
        # Killed (or lost) without a resume: nothing will ever finish its record.
        status = "abandoned"
    row = {
        "run_id": run.run_id,
        "pipeline": run.pipeline,
        "status": status,
        "start": _time(run.start_time),
        "end": _time(run.end_time),
        "data": run.properties.get("data"),
        "module": run.properties.get("module"),
        "stages": {stage: status.value for stage, status in run.stages.items()},
        "cached": [s for s, status in run.stages.items() if status is ExecutionStatus.CACHED],
    }
    # What the stages recorded for the history: the columns of `runs list` (those its
    # graph declared, in its order, with their values where none was recorded; then any
    # other, in the order the stages ran) and facts; each also a key of the row unless the
    # row has it already.
    columns = {**(run.properties.get(HISTORY_COLUMNS) or {}), **_merged(entries, "columns")}
    for name, value in {**columns, **_merged(entries, "facts")}.items():
        row.setdefault(name, value)
    row["columns"] = columns
    return row


def run_rows(store: MetadataStore, limit: Optional[int] = None) -> list[dict[str, Any]]:
    """Every recorded run (the ``limit`` newest), newest first: id, start, status, data and
    module fingerprints, each stage's status, the cached stages, and the columns and facts
    its stages recorded for the history (``columns``: name -> value, in the order the
    stages ran; each also a key of the row)."""
    runs = store.list_runs()
    return [_row(store, run) for run in (runs if limit is None else runs[:limit])]


def _summary_status(e: ExecutionRecord, original: Optional[ExecutionRecord]) -> str:
    """The status the run's summary gave the stage: a reused execution is ``cached``, but
    a reused stage that was skipped and made nothing stays ``skipped`` there (as in
    :func:`beam_pipeline.engine.runner.run_stages`)."""
    if e.status is not ExecutionStatus.CACHED:
        return _execution_status(e)  # the Pusher's and BulkInferrer's skips too
    if original is None or original.outputs:
        return e.status.value
    reports = original.properties.get("reports") or []
    skipped = bool(reports) and reports[0].get("status") == "skipped"
    return "skipped" if skipped else e.status.value


def run_view(store: MetadataStore, run_id: str) -> dict[str, Any]:
    """One run: its row, each execution with inputs, outputs, parameters and job ids, the
    model checks' verdicts (:func:`model_checks`) and the lines its stages recorded for
    ``runs show`` (``lines``).

    Raises:
      PipelineError: no such run is recorded.
    """
    executions = run_executions(store, run_id)
    row = next(_row(store, r) for r in store.list_runs() if r.run_id == run_id)
    originals = made_by(store, executions)
    row["executions"] = [
        execution_view(e, originals[e.id].run_id if e.id in originals else None) for e in executions
    ]
    for view, e in zip(row["executions"], executions):
        view["summary_status"] = _summary_status(e, originals.get(e.id))
    row["model_checks"] = model_checks(executions, originals)
    entries = history_entries(executions, originals)
    row["lines"] = [line for _, entry in entries for line in entry.get("lines") or ()]
    return row


def lineage_view(store: MetadataStore, uri: str) -> dict[str, Any]:
    """What made the artifact at ``uri`` (every execution upstream) and everything made
    from it (downstream).

    Raises:
      PipelineError: no artifact is recorded at ``uri``.
    """
    if not fileio.is_remote(uri):  # stored absolute, without a trailing slash
        uri = os.path.abspath(uri)
    found: Optional[Lineage] = store.lineage(uri)
    if found is None:
        raise PipelineError(
            f"No artifact at {uri!r} is recorded in the metadata store {store.url}; pass an "
            "artifact's uri as `runs show RUN` prints it (e.g. <run dir>/schema)."
        )
    artifact = artifact_view(found.artifact)
    # The record outlives the folder: say so, not only the state it was recorded in. (A
    # remote one is not looked up: that takes TensorFlow's filesystems, which the runs
    # commands do not load.)
    artifact["exists"] = fileio.is_remote(uri) or fileio.exists(uri)
    return {
        "artifact": artifact,
        "upstream": [execution_view(e) for e in found.upstream],
        "downstream": [execution_view(e) for e in found.downstream],
    }
