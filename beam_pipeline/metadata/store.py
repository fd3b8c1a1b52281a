"""The metadata store: what the runner records of every run, and what it asks back.

The runner's seam is six calls: :meth:`MetadataStore.start_run`, then per stage
:meth:`~MetadataStore.find_cached` (a hit: :meth:`~MetadataStore.record_cached`) or
:meth:`~MetadataStore.begin_execution`, :meth:`~MetadataStore.publish_outputs` and
:meth:`~MetadataStore.complete_execution` (or :meth:`~MetadataStore.fail_execution`),
and :meth:`~MetadataStore.finish_run`. Each call is one short transaction, so concurrent
runs on one store interleave without holding each other up (see
:mod:`~beam_pipeline.metadata.connection`). History (:meth:`~MetadataStore.list_runs`,
:meth:`~MetadataStore.run_executions`, :meth:`~MetadataStore.lineage`) and the latest
blessed model are read back for people and later stages.

One concept, hence one module of some 400 lines: the store's public API, each method a
transaction; the row writes are in :mod:`~beam_pipeline.metadata.rows`, the reads in
:mod:`~beam_pipeline.metadata.queries`.

Example::

    with MetadataStore.for_pipeline_root(root, url=config.metadata_url) as store:
        run = store.start_run(run_id)
        hit = store.find_cached("Schema", key)
        if hit:
            store.record_cached(run, "Schema", params, key, {"statistics": stats}, hit)
        else:
            execution = store.begin_execution(run, "Schema", params, key, {"statistics": stats})
            ...  # run the stage, publish its folder
            store.publish_outputs(execution, {"schema": ArtifactSpec(uri, "Schema")})
            store.complete_execution(execution, job_ids=[job_id])
        store.finish_run(run, RunStatus.COMPLETE)
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional

import sqlalchemy as sa

import beam_pipeline.metadata.queries as queries
import beam_pipeline.metadata.schema as s
from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.secrets import mask
from beam_pipeline.core.types import PUBLISHED_MARKER
from beam_pipeline.metadata.connection import (
    METADATA_FILE,
    READ_ONLY,
    default_url,
    open_engine,
    write_error,
)
from beam_pipeline.metadata.launcher import launcher_gone
from beam_pipeline.metadata.records import (
    PIPELINE_CONTEXT,
    RUN_CONTEXT,
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
    TypeKind,
    pipeline_name_for,
    run_context_name,
)
from beam_pipeline.metadata.rows import Input, Rows, now_ms, to_json

__all__ = ["MetadataStore", "DEFAULT_PIPELINE", "is_available", "open_for_pipeline"]

DEFAULT_PIPELINE = "beam-pipeline"


# The error of an execution a killed attempt left running, recorded when the run resumes.
def _refuse_live_launcher(run_id: str, context_properties: Optional[Mapping[str, Any]]) -> None:
    """Two launchers of one run would remove each other's staging folders and mark each
    other's stages abandoned: a run recorded as running by a launcher that is alive on this
    host (another process: pid and start time) is refused in one sentence."""
    props = context_properties or {}
    launcher = (props.get("properties") or {}).get("launcher")
    if props.get("status") != RunStatus.RUNNING.value or launcher_gone(launcher) is not False:
        return
    if launcher.get("pid") == os.getpid():
        return  # this very process (the Python API running the same run id again)
    raise PipelineError(
        f"Run {run_id!r} is being run now by another launcher (pid {launcher['pid']} on "
        f"{launcher['host']}); wait for it to end (or stop it) before resuming it, or pass "
        "another --run_id."
    )


_ABANDONED = (
    "its launcher stopped during it (killed, or its machine lost); a later attempt of the "
    "run took over"
)


def is_available(artifact: ArtifactRecord) -> bool:
    """Whether an artifact can be reused: published in the store and still on disk (a
    folder with its publish marker: a partly copied or deleted one is not)."""
    if artifact.state is not ArtifactState.PUBLISHED or not fileio.exists(artifact.uri):
        return False
    return not fileio.isdir(artifact.uri) or fileio.exists(
        fileio.join(artifact.uri, PUBLISHED_MARKER)
    )


class MetadataStore:
    """Runs, executions and artifacts in a SQL database (ML Metadata's model).

    Open it with :meth:`open` or :meth:`for_pipeline_root`; close it (or use ``with``)
    when the run ends. Not to be shared across processes: each opens its own.

    One store may hold many pipelines (a team's server): an instance serves one,
    :attr:`pipeline`, as TFX's pipeline context does. It records runs under that name, and
    every look-up (runs, a run's executions, cache hits, the latest blessed model, lineage)
    sees that pipeline's records only.
    """

    def __init__(self, engine: sa.engine.Engine, pipeline: str = DEFAULT_PIPELINE):
        self._engine = engine
        self._type_ids: dict[tuple[TypeKind, str], int] = {}
        self.pipeline = pipeline

    @classmethod
    def open(cls, url: str, pipeline: str = DEFAULT_PIPELINE) -> MetadataStore:
        """Opens the store at SQLAlchemy ``url`` for ``pipeline``'s records, creating or
        upgrading its schema.

        Raises:
          PipelineError: the URL cannot be used (unreachable, driver missing, a folder
            missing or read-only, a corrupt file, a newer schema); one sentence with the fix.
        """
        return cls(open_engine(url), pipeline)

    @classmethod
    def for_pipeline_root(
        cls, pipeline_root: str, url: Optional[str] = None, pipeline: Optional[str] = None
    ) -> MetadataStore:
        """The store at ``url``, or by default ``<pipeline_root>/metadata.sqlite`` (the
        pipeline root is created if missing; a given URL's folder is not), for the records
        of ``pipeline`` (by default named after the pipeline root:
        :func:`~beam_pipeline.metadata.records.pipeline_name_for`)."""
        pipeline = pipeline or pipeline_name_for(pipeline_root)
        if url:
            return cls.open(url, pipeline)
        default = default_url(pipeline_root)
        fileio.makedirs(pipeline_root)
        return cls.open(default, pipeline)

    def with_pipeline(self, pipeline: str) -> MetadataStore:
        """The same store (its connections shared) serving ``pipeline``'s records."""
        return MetadataStore(self._engine, pipeline)

    @property
    def url(self) -> str:
        """The store's URL, without its password or other credentials."""
        return mask(self._engine.url.render_as_string(hide_password=True))

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _failures(self) -> Iterator[None]:
        """A store failing after it opened (a full disk, a server gone) as one sentence
        (:func:`~beam_pipeline.metadata.connection.write_error`)."""
        try:
            yield
        except sa.exc.DBAPIError as e:
            error = write_error(self._engine.url, e)
            if error is None:
                raise
            raise error from e

    @contextlib.contextmanager
    def _write(self) -> Iterator[Rows]:
        """One write transaction (on SQLite: BEGIN IMMEDIATE, see ``connection``)."""
        with self._failures(), self._engine.begin() as conn:
            yield Rows(conn, self._type_ids)

    @contextlib.contextmanager
    def _read(self) -> Iterator[sa.Connection]:
        with self._failures(), self._engine.connect() as conn:
            conn.execution_options(**{READ_ONLY: True})
            yield conn

    # Runs -----------------------------------------------------------------------------

    def start_run(self, run_id: str, properties: Optional[Mapping[str, Any]] = None) -> RunRef:
        """Records run ``run_id`` of the store's pipeline as running (a rerun of a recorded
        run id, a resume, continues its record, and records the executions the earlier
        attempt left running as abandoned). ``properties``: JSON values to show with the
        run (data and module fingerprints, ...), merged into those recorded before."""
        pipeline = self.pipeline
        name = run_context_name(pipeline, run_id)
        with self._write() as rows:
            found = rows.context(PIPELINE_CONTEXT, pipeline)
            parent = found.id if found else rows.new_context(PIPELINE_CONTEXT, pipeline, {})
            found = rows.context(RUN_CONTEXT, name)
            if found is None:
                props = {
                    "run_id": run_id,
                    "status": RunStatus.RUNNING.value,
                    "properties": dict(properties or {}),
                }
                context_id = rows.new_context(RUN_CONTEXT, name, props)
                rows.conn.execute(
                    sa.insert(s.parent_contexts).values(
                        context_id=context_id, parent_context_id=parent
                    )
                )
            else:
                _refuse_live_launcher(run_id, found.properties)
                context_id = found.id
                rows.update_run(context_id, RunStatus.RUNNING, properties)
                # No live launcher runs it (checked above, on this host; docs/limits.md for
                # launchers on other hosts), so what is still running belongs to an
                # earlier attempt that was killed.
                rows.abandon_running(context_id, _ABANDONED)
        return RunRef(context_id=context_id, run_id=run_id, pipeline=pipeline)

    def refuse_live_run(self, run_id: str) -> None:
        """Raises the sentence of :func:`_refuse_live_launcher` when run ``run_id`` is being
        run now by another launcher on this host: called before a resume touches the run's
        folder (it removes the staging folders a live attempt is writing)."""
        with self._read() as conn:
            found = conn.execute(
                sa.select(s.contexts.c.properties).where(
                    s.contexts.c.name == run_context_name(self.pipeline, run_id)
                )
            ).first()
        if found is not None:
            _refuse_live_launcher(run_id, found.properties)

    def finish_run(
        self, run: RunRef, status: RunStatus, properties: Optional[Mapping[str, Any]] = None
    ) -> None:
        """Records the run's end and outcome (and more properties: key metrics, ...)."""
        with self._write() as rows:
            rows.update_run(run.context_id, status, properties, end_ms=now_ms())

    # Artifacts ------------------------------------------------------------------------

    def set_custom_property(self, artifact_id: int, name: str, value: Any) -> None:
        """Sets a custom property of an artifact (``blessed``: True, by the Evaluator)."""
        with self._write() as rows:
            rows.set_properties(artifact_id, {name: value}, custom=True)

    def mark_deleted(self, uris: Iterable[str]) -> int:
        """Records the artifacts at ``uris`` as deleted (the runner removed their folders);
        returns how many were not already."""
        uris = sorted(set(uris))
        if not uris:
            return 0
        with self._write() as rows:
            return rows.conn.execute(
                sa.update(s.artifacts)
                .where(
                    s.artifacts.c.uri.in_(uris),
                    s.artifacts.c.state != ArtifactState.DELETED.value,
                )
                .values(state=ArtifactState.DELETED.value, update_time_ms=now_ms())
            ).rowcount

    # Executions -----------------------------------------------------------------------

    def begin_execution(
        self,
        run: RunRef,
        stage: str,
        parameters: Mapping[str, Any],
        cache_key: Optional[str],
        inputs: Mapping[str, Input],
        outputs: Optional[Mapping[str, ArtifactSpec]] = None,
    ) -> ExecutionRef:
        """Records that ``stage`` starts in ``run``.

        Args:
          parameters: the stage's parameters (JSON values).
          cache_key: the digest :meth:`find_cached` will look it up by (None: never cached).
          inputs: by role name, artifacts of earlier executions (records), or external
            ones such as the input data (specs: registered on first use).
          outputs: by role name, the artifacts it will write, recorded as pending until
            :meth:`publish_outputs`.
        """
        with self._write() as rows:
            execution_id = rows.new_execution(
                run, stage, parameters, cache_key, ExecutionStatus.RUNNING
            )
            ids = {role: rows.input_id(item, run) for role, item in inputs.items()}
            rows.events(execution_id, EventType.INPUT, ids)
            pending = {
                role: rows.new_artifact(spec, ArtifactState.PENDING, run)
                for role, spec in (outputs or {}).items()
            }
            rows.events(execution_id, EventType.OUTPUT, pending)
        return ExecutionRef(id=execution_id, stage=stage, run=run)

    def publish_outputs(
        self, execution: ExecutionRef, outputs: Mapping[str, ArtifactSpec]
    ) -> dict[str, ArtifactRecord]:
        """Records the execution's outputs (by role name) as published, once their folders
        are in place; a pending output of the same role takes the spec's uri, properties
        and fingerprint. What was published at the same uri before (an earlier attempt's
        output, replaced) becomes deleted. Returns them as stored, for the next stages'
        inputs.

        Raises:
          ValueError: the execution is not running.
        """
        with self._write() as rows:
            rows.check_running(execution)
            declared = rows.outputs(execution.id)
            ids, new = {}, {}
            for role, spec in outputs.items():
                if role in declared:
                    ids[role] = declared[role].id
                    rows.set_state(
                        [ids[role]],
                        ArtifactState.PUBLISHED,
                        uri=spec.uri,
                        fingerprint=spec.fingerprint,
                    )
                    rows.set_properties(ids[role], spec.properties, custom=False)
                    rows.supersede(spec.uri, ids[role])
                else:
                    new[role] = ids[role] = rows.new_artifact(
                        spec, ArtifactState.PUBLISHED, execution.run
                    )
            rows.events(execution.id, EventType.OUTPUT, new)
            stored = queries.load_artifacts(rows.conn, ids.values())
        return {role: stored[i] for role, i in ids.items()}

    def add_job_ids(self, execution: ExecutionRef, job_ids: Sequence[str]) -> None:
        """Appends Beam job ids to the execution's (as each job is submitted)."""
        if job_ids:
            with self._write() as rows:
                rows.append_jobs(execution, job_ids)

    def complete_execution(
        self,
        execution: ExecutionRef,
        job_ids: Sequence[str] = (),
        properties: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Records the execution as complete: from now on a cache hit for its key.

        Args:
          job_ids: Beam job ids to append to those recorded.
          properties: what to keep of it besides its parameters (JSON values: its summary
            rows, facts a run reusing it needs), merged into its properties.

        Raises:
          ValueError: an output declared at :meth:`begin_execution` was never published,
            or the execution is not running.
        """
        with self._write() as rows:
            rows.check_running(execution)
            pending = [
                role
                for role, row in rows.outputs(execution.id).items()
                if row.state != ArtifactState.PUBLISHED.value
            ]
            if pending:
                raise ValueError(f"{execution.stage} did not publish its outputs {pending}")
            rows.append_jobs(execution, job_ids)
            rows.update_properties(execution, properties or {})
            rows.end(execution.id, ExecutionStatus.COMPLETE)

    def fail_execution(
        self,
        execution: ExecutionRef,
        error: str,
        properties: Optional[Mapping[str, Any]] = None,
    ) -> None:
        """Records the execution as failed with its error (and ``properties``, merged);
        its pending outputs, discarded by the runner, become deleted."""
        self._stop(execution, ExecutionStatus.FAILED, properties, error=mask(error))

    def cancel_execution(
        self, execution: ExecutionRef, properties: Optional[Mapping[str, Any]] = None
    ) -> None:
        """Records the execution as canceled: it stopped without a result and without an
        error (a dry run, a stage with nothing to do); its pending outputs become deleted."""
        self._stop(execution, ExecutionStatus.CANCELED, properties)

    def _stop(self, execution, status, properties, **more) -> None:
        with self._write() as rows:
            rows.update_properties(execution, properties or {})
            rows.stop(execution.id, status, **more)

    # Caching --------------------------------------------------------------------------

    def find_cached(self, stage: str, cache_key: str) -> Optional[CachedOutputs]:
        """The outputs of the newest complete execution of ``stage`` with ``cache_key`` in
        this pipeline's runs whose outputs are all still published and on disk; None
        otherwise (a missing or unpublished output is a miss, never an error)."""
        with self._read() as conn:
            type_id = conn.execute(
                sa.select(s.types.c.id).where(
                    s.types.c.kind == TypeKind.EXECUTION.value, s.types.c.name == stage
                )
            ).scalar()
            ids = conn.execute(
                sa.select(s.executions.c.id).where(
                    s.executions.c.type_id == type_id,
                    s.executions.c.cache_key == cache_key,
                    s.executions.c.status == ExecutionStatus.COMPLETE.value,
                    s.executions.c.id.in_(queries.pipeline_executions(self.pipeline)),
                )
            ).scalars()
            candidates = queries.load_executions(conn, ids)
        # The folders are checked outside the transaction: it holds no lock meanwhile.
        for execution in reversed(candidates):
            if all(is_available(a) for a in execution.outputs.values()):
                return CachedOutputs(
                    execution_id=execution.id,
                    run_id=execution.run_id,
                    outputs=execution.outputs,
                    properties=execution.properties,
                    end_time=execution.end_time,
                )
        return None

    def record_cached(
        self,
        run: RunRef,
        stage: str,
        parameters: Mapping[str, Any],
        cache_key: str,
        inputs: Mapping[str, Input],
        cached: CachedOutputs,
        properties: Optional[Mapping[str, Any]] = None,
    ) -> ExecutionRef:
        """Records a cache hit: a ``CACHED`` execution in ``run`` with its inputs and the
        reused outputs (attributed to this run too), where they came from, and
        ``properties`` (JSON values)."""
        with self._write() as rows:
            execution_id = rows.new_execution(
                run,
                stage,
                parameters,
                cache_key,
                ExecutionStatus.CACHED,
                cached_from_id=cached.execution_id,
                end_time_ms=now_ms(),
                properties=json.loads(to_json(properties or {})),
            )
            ids = {role: rows.input_id(item, run) for role, item in inputs.items()}
            rows.events(execution_id, EventType.INPUT, ids)
            outputs = {role: a.id for role, a in cached.outputs.items()}
            rows.events(execution_id, EventType.OUTPUT, outputs)
            rows.attribute(run, outputs.values())
        return ExecutionRef(id=execution_id, stage=stage, run=run)

    def latest_blessed_model(
        self, type_name: str = "Model", on_disk: bool = True
    ) -> Optional[ArtifactRecord]:
        """The newest published artifact of ``type_name`` of this pipeline's runs whose
        property or custom property ``blessed`` is true and whose folder is still there
        (or, not ``on_disk``, whether it is there or not); None if there is none."""
        p = s.artifact_properties
        with self._read() as conn:
            ids = conn.execute(
                sa.select(s.artifacts.c.id)
                .join(s.types, s.types.c.id == s.artifacts.c.type_id)
                .join(p, p.c.artifact_id == s.artifacts.c.id)
                .where(
                    s.types.c.kind == TypeKind.ARTIFACT.value,
                    s.types.c.name == type_name,
                    s.artifacts.c.state == ArtifactState.PUBLISHED.value,
                    p.c.name == "blessed",
                    p.c.value == to_json(True),
                    s.artifacts.c.id.in_(queries.pipeline_artifacts(self.pipeline)),
                )
                .order_by(s.artifacts.c.id.desc())
            ).scalars()
            found = queries.load_artifacts(conn, ids)
        newest_first = [a for _, a in sorted(found.items(), reverse=True)]
        return next((a for a in newest_first if is_available(a) or not on_disk), None)

    # History --------------------------------------------------------------------------

    def list_runs(self) -> list[RunRecord]:
        """Every recorded run of this pipeline, newest first."""
        with self._read() as conn:
            return queries.list_runs(conn, self.pipeline)

    def pipelines(self) -> list[str]:
        """The names of the pipelines the store holds runs of, sorted."""
        with self._read() as conn:
            return sorted({r.pipeline for r in queries.list_runs(conn)})

    def run_executions(self, run_id: str) -> Optional[list[ExecutionRecord]]:
        """This pipeline's run ``run_id``'s executions in the order they began, each with
        its inputs, outputs, parameters and Beam job ids; None if no such run is recorded."""
        with self._read() as conn:
            ids = queries.run_execution_ids(conn, self.pipeline, run_id)
            return None if ids is None else queries.load_executions(conn, ids)

    def executions(self, ids: Iterable[int]) -> list[ExecutionRecord]:
        """The executions with these ids (those recorded), in the order they began."""
        with self._read() as conn:
            return queries.load_executions(conn, ids)

    def lineage(self, uri: str) -> Optional[Lineage]:
        """The newest artifact of this pipeline at ``uri`` with every execution of its runs
        upstream (what made it) and downstream (what was made from it); None if no artifact
        is recorded there."""
        with self._read() as conn:
            return queries.lineage(conn, uri, self.pipeline)


def open_for_pipeline(
    pipeline_root: str,
    url: Optional[str] = None,
    *,
    existing: bool = False,
    pipeline_name: Optional[str] = None,
) -> Optional[MetadataStore]:
    """A pipeline's metadata store: the one at ``url``, else the SQLite file
    ``metadata.sqlite`` in ``pipeline_root``; the one rule by which runs, stages and
    ``runs`` find it.

    Args:
      pipeline_root: the pipeline root (``--pipeline_root``).
      url: ``--metadata_url``; empty or None for the default store.
      existing: for readers (``runs``): the default store must exist already, and a
        missing one is an error rather than a new, empty file.
      pipeline_name: ``--pipeline_name``: the pipeline whose records the store serves;
        empty or None: the one named after ``pipeline_root``.

    Returns:
      The store (close it, or use ``with``); None for a remote pipeline root without a
      URL (SQLite cannot live there), unless ``existing``.

    Raises:
      PipelineError: ``existing`` and no store at the default path; or the store cannot
        be opened (see :meth:`MetadataStore.open`).
    """
    pipeline = pipeline_name or pipeline_name_for(pipeline_root)
    if url:
        return MetadataStore.open(url, pipeline)
    remote = fileio.is_remote(pipeline_root)
    if existing:
        path = fileio.join(pipeline_root, METADATA_FILE)
        if remote or not fileio.exists(path):
            raise PipelineError(
                f"No metadata store at {path}; pass the --pipeline_root your runs used, or "
                "--metadata_url for a store elsewhere."
            )
    elif remote:
        return None
    return MetadataStore.for_pipeline_root(pipeline_root, pipeline=pipeline)
