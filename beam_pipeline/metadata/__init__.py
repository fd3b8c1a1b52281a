"""The metadata store: every run's executions, artifacts and the events between them, in SQL.

Modelled on ML Metadata's data model (which has no release for this stack): artifacts
(uri, type, state, fingerprint, properties), executions (stage, parameters, cache key,
status, start/end, Beam job ids), events (execution <-> artifact, input or output) and
contexts (the pipeline and each run) with attributions and associations. SQLAlchemy
2.x over any database it supports; by default a SQLite file ``metadata.sqlite`` in the
pipeline root. The schema is created and upgraded by Alembic migrations shipped in
``migrations/``. It serves the runner (record each execution, find a cached one by
stage and cache key), the evaluation (the latest blessed model) and people (runs,
one run's executions, an artifact's lineage).

Example::

    from beam_pipeline.metadata import ArtifactSpec, MetadataStore, RunStatus

    with MetadataStore.for_pipeline_root("pipeline_runs") as store:
        run = store.start_run("20260101-120000-abcdef")
        execution = store.begin_execution(run, "Schema", {"infer_feature_shape": True},
                                          cache_key, {"statistics": statistics})
        store.publish_outputs(execution, {"schema": ArtifactSpec(uri, "Schema")})
        store.complete_execution(execution)
        store.finish_run(run, RunStatus.COMPLETE)
        store.find_cached("Schema", cache_key)   # -> CachedOutputs(outputs={"schema": ...})
"""

from beam_pipeline.metadata.connection import METADATA_FILE, default_url
from beam_pipeline.metadata.records import (
    ArtifactRecord,
    ArtifactSpec,
    ArtifactState,
    CachedOutputs,
    EventType,
    ExecutionRecord,
    ExecutionRef,
    ExecutionStatus,
    Lineage,
    RunRecord,
    RunRef,
    RunStatus,
)
from beam_pipeline.metadata.store import DEFAULT_PIPELINE, MetadataStore, open_for_pipeline

__all__ = [
    "ArtifactRecord",
    "ArtifactSpec",
    "ArtifactState",
    "CachedOutputs",
    "DEFAULT_PIPELINE",
    "EventType",
    "ExecutionRecord",
    "ExecutionRef",
    "ExecutionStatus",
    "Lineage",
    "METADATA_FILE",
    "MetadataStore",
    "RunRecord",
    "RunRef",
    "RunStatus",
    "default_url",
    "open_for_pipeline",
]
