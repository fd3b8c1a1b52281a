"""What the metadata store hands in and out: statuses as enums, records as frozen dataclasses.

The names follow ML Metadata's data model (artifacts, executions, events, contexts), so a
reader who knows TFX's store finds the same things here.

Example::

    spec = ArtifactSpec(uri=run_dir.path(Artifact.SCHEMA), type_name="Schema",
                        properties={"features": 8}, fingerprint=digest)
    record.state is ArtifactState.PUBLISHED
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import hashlib
import os
from collections.abc import Mapping
from typing import Any, Optional

__all__ = [
    "ArtifactRecord",
    "ArtifactSpec",
    "ArtifactState",
    "CachedOutputs",
    "EventType",
    "ExecutionRecord",
    "ExecutionRef",
    "ExecutionStatus",
    "Lineage",
    "RunRecord",
    "RunRef",
    "RunStatus",
    "TypeKind",
    "pipeline_name_for",
    "run_context_name",
]


class TypeKind(str, enum.Enum):
    """What a row of the ``types`` table types (as ML Metadata's three kinds of type)."""

    ARTIFACT = "artifact"
    EXECUTION = "execution"
    CONTEXT = "context"


class ArtifactState(str, enum.Enum):
    """An artifact's life: declared before its stage writes it, published, deleted."""

    PENDING = "pending"
    PUBLISHED = "published"
    DELETED = "deleted"


class ExecutionStatus(str, enum.Enum):
    """An execution's outcome. A killed run leaves ``RUNNING`` (never ``COMPLETE``) until
    the run is resumed, which records it ``ABANDONED``."""

    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    CACHED = "cached"  # reused the outputs of an earlier COMPLETE execution
    CANCELED = "canceled"  # stopped without a result and without an error (a dry run)
    ABANDONED = "abandoned"  # its launcher stopped during it (killed); found on a resume


class EventType(str, enum.Enum):
    """Which way an event links an execution and an artifact."""

    INPUT = "input"
    OUTPUT = "output"


class RunStatus(str, enum.Enum):
    """A run's outcome, kept in its context's properties."""

    RUNNING = "running"
    COMPLETE = "complete"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM or SIGHUP stopped it; resumable


# The context types: a run belongs to a pipeline (ML Metadata's parent context).
PIPELINE_CONTEXT = "pipeline"
RUN_CONTEXT = "run"
# The longest pipeline name: a context's name column holds 255 characters.
MAX_PIPELINE_NAME = 255


def pipeline_name_for(pipeline_root: str) -> str:
    """The pipeline name a run under ``pipeline_root`` is recorded under when
    ``--pipeline_name`` is not given: the root's absolute path (or URI), as TFX keys its
    records by a pipeline name. A path longer than a name may be keeps its last
    characters and gains a digest of the whole."""
    name = pipeline_root if "://" in pipeline_root else os.path.abspath(pipeline_root)
    name = name.rstrip("/") or "/"
    if len(name) <= MAX_PIPELINE_NAME:
        return name
    digest = hashlib.blake2b(name.encode(), digest_size=8).hexdigest()
    return f"{digest}-{name[-(MAX_PIPELINE_NAME - len(digest) - 1) :]}"


def run_context_name(pipeline: str, run_id: str) -> str:
    """The name of run ``run_id``'s context: run ids are unique within a pipeline only,
    context names within the whole store, so the name carries a digest of the pipeline's
    (fixed length: a name holds 255 characters). Migration 0005 has a frozen copy."""
    digest = hashlib.blake2b(pipeline.encode(), digest_size=8).hexdigest()
    return f"{digest}:{run_id}"


def from_ms(ms: Optional[int]) -> Optional[datetime.datetime]:
    """A stored time (milliseconds since the epoch, as ML Metadata keeps them) in UTC."""
    if ms is None:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


@dataclasses.dataclass(frozen=True)
class ArtifactSpec:
    """An artifact as a stage declares it: where it is, what it is, what it holds.

    Attributes:
      uri: its folder (or file), local or ``gs://``.
      type_name: its type (``Examples``, ``Schema``, ``Model``, ...).
      properties: JSON values describing it (split names, row counts, ...).
      fingerprint: a digest of its content, where the stage computed one.
    """

    uri: str
    type_name: str
    properties: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    fingerprint: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class ArtifactRecord:
    """An artifact as stored (``id`` is its row)."""

    id: int
    type_name: str
    uri: str
    state: ArtifactState
    fingerprint: Optional[str]
    properties: Mapping[str, Any]
    custom_properties: Mapping[str, Any]
    create_time: datetime.datetime


@dataclasses.dataclass(frozen=True)
class RunRef:
    """A started run, as :meth:`MetadataStore.start_run` returns it."""

    context_id: int
    run_id: str
    pipeline: str


@dataclasses.dataclass(frozen=True)
class ExecutionRef:
    """A begun execution, as :meth:`MetadataStore.begin_execution` returns it."""

    id: int
    stage: str
    run: RunRef


@dataclasses.dataclass(frozen=True)
class ExecutionRecord:
    """One execution of a stage with what it read and wrote (artifacts by role name).

    Attributes:
      cached_from: for a ``CACHED`` execution, the id of the execution whose outputs it
        reused.
      beam_job_ids: the Beam jobs it ran, in order.
      properties: what the runner kept of it besides its parameters (JSON values: its
        summary rows, facts a later run needs when it reuses it).
    """

    id: int
    stage: str
    run_id: Optional[str]
    status: ExecutionStatus
    cache_key: Optional[str]
    parameters: Mapping[str, Any]
    start_time: datetime.datetime
    end_time: Optional[datetime.datetime]
    beam_job_ids: tuple[str, ...]
    error: Optional[str]
    cached_from: Optional[int]
    properties: Mapping[str, Any]
    inputs: Mapping[str, ArtifactRecord]
    outputs: Mapping[str, ArtifactRecord]


@dataclasses.dataclass(frozen=True)
class CachedOutputs:
    """A cache hit: the execution whose outputs can be reused, those outputs, and what
    the runner kept of it (its properties) and when it ended."""

    execution_id: int
    run_id: Optional[str]
    outputs: Mapping[str, ArtifactRecord]
    properties: Mapping[str, Any]
    end_time: Optional[datetime.datetime]


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One run in the history.

    Attributes:
      stages: per stage, the status of its latest execution in this run.
      properties: what the runner recorded for the run (data and module fingerprints,
        key metrics, ...), besides its status.
    """

    run_id: str
    pipeline: str
    status: RunStatus
    start_time: datetime.datetime
    end_time: Optional[datetime.datetime]
    properties: Mapping[str, Any]
    stages: Mapping[str, ExecutionStatus]


@dataclasses.dataclass(frozen=True)
class Lineage:
    """An artifact's lineage: every execution upstream of it (what it was made from, back to
    the external data) and downstream (everything made from it), each in the order run.
    Each execution carries its inputs and outputs, so the graph's edges are all there."""

    artifact: ArtifactRecord
    upstream: tuple[ExecutionRecord, ...]
    downstream: tuple[ExecutionRecord, ...]
