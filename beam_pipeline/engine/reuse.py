"""Whether an earlier execution's outputs may be reused, and how a reuse is reported.

Each output's files are recorded when it is published (:func:`with_contents`); an
execution is reused only when every output is still published and holds those files
(:func:`reusable`): a damaged artifact never reaches a later stage. Its summary rows are
then reported ``cached`` (:func:`cached_rows`); a rerun's first row says why it reran
(:func:`noted`). The runner (:mod:`beam_pipeline.engine.runner`) calls these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import TypedArtifact
from beam_pipeline.engine.contents import SMALL_FILE_BYTES, changed, describe
from beam_pipeline.engine.execution import Execution
from beam_pipeline.engine.summary import StageReport, StageStatus

__all__ = ["FILES_PROPERTY", "cached_rows", "noted", "reusable", "with_contents"]

# The artifact property that records its files when published (beam_pipeline.engine.contents).
FILES_PROPERTY = "files"


def reusable(execution: Optional[Execution]) -> tuple[Optional[Execution], str]:
    """The execution when every output of it is still published and holds what it held
    when published (else a miss), and why a published one is not reused ("" if none).

    Each output's files were recorded when it was published (:func:`with_contents`); a
    file missing, added, of another size, or a small one with other content is a damaged
    artifact (a full disk, a hand edit, a partial copy), which must never reach a later
    stage: the stage is recomputed and its summary row says why. An output recorded
    without its files (by an older version) is checked for its marker only.
    """
    if execution is None or not all(a.is_published() for a in execution.outputs):
        return None, ""
    for artifact in execution.outputs:
        recorded = artifact.properties.get(FILES_PROPERTY)
        problem = (
            changed(artifact.uri, recorded, ignore=artifact.ADDED_LATER)
            if recorded is not None
            else None
        )
        if problem is not None:
            return None, (
                f"run {execution.run_id}'s {artifact.folder_name()} changed since it was "
                f"published ({problem}); recomputed"
            )
    return execution, ""


def noted(rows: Sequence[StageReport], note: str) -> list[StageReport]:
    """The rows for this run's summary, the first one saying why the stage reran (a copy:
    the execution's own rows, which a later run may reuse, do not say it)."""
    if not note or not rows:
        return list(rows)
    first = StageReport.from_json(rows[0].to_json())
    first.note = f"{note}; {first.note}" if first.note else note
    return [first, *rows[1:]]


def with_contents(artifact: TypedArtifact) -> TypedArtifact:
    """The published artifact with its files recorded (what :func:`reusable` checks)."""
    if not fileio.isdir(artifact.uri):
        return artifact
    files = describe(artifact.uri, small=None if artifact.DIGEST_EVERY_FILE else SMALL_FILE_BYTES)
    return dataclasses.replace(artifact, properties={**artifact.properties, FILES_PROPERTY: files})


def cached_rows(execution: Execution, run_id: str) -> list[StageReport]:
    """An earlier execution's summary rows, as CACHED: the run reuses what it made, as the
    metadata store records it (``runs show``). A SKIPPED row of an execution that made
    nothing stays SKIPPED (a stage turned off: nothing is reused); one that made an
    artifact (the Pusher's record of a model it did not push) is CACHED."""
    rows = []
    for earlier in execution.reports:
        row = StageReport.from_json(earlier.to_json())
        row.seconds = 0.0
        if row.status is not StageStatus.SKIPPED or execution.outputs:
            row.status = StageStatus.CACHED
            if execution.run_id == run_id:
                note = f"kept from an earlier attempt of run {execution.run_id}"
            else:
                note = f"reused from run {execution.run_id}"
            row.note = f"{note}; {row.note}" if row.note else note
            row.details = dict(row.details, cached_from=execution.finished)
        rows.append(row)
    return rows
