"""A run's execution records: its manifest (resume) and the metadata store (caching across
runs, history, lineage).

:class:`RunRecords` is the :class:`~beam_pipeline.engine.execution.ExecutionRecords` the
runner gets. A look-up asks this run's manifest first (a resume keeps what an earlier
attempt of the run finished), then the metadata store: the newest complete execution of
the stage with the same cache key, in any run, whose outputs are all still published and
on disk. Every execution is recorded in both: the store gets it when it begins
(``running``; a killed run leaves it so, never ``complete``), when it fails (with its
error), is canceled (a dry run) or completes (outputs, Beam job ids, summary rows); a
reuse of another run's execution is recorded as ``cached`` with the execution it came
from. The stages in ``no_cache`` (``--no_cache``) are never looked up. Without a store (a
remote pipeline root and no ``--metadata_url``) only the manifest is used.

Example::

    records = RunRecords(manifest, store, run, data=ArtifactSpec(path, "ExternalData"))
    run_stages(STAGE_GRAPH, ctx, records, summary)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import TypedArtifact
from beam_pipeline.engine.execution import Execution
from beam_pipeline.engine.manifest import RunManifest
from beam_pipeline.engine.summary import StageReport
from beam_pipeline.metadata import ArtifactSpec, CachedOutputs, ExecutionRef, MetadataStore, RunRef

__all__ = ["DATA_ROLE", "DATA_TYPE", "RunRecords", "stored_lookup", "stored_uri"]

# ExampleGen's input, the run's data, as an external artifact of the store.
DATA_ROLE = "data"
DATA_TYPE = "ExternalData"

_LOG = logging.getLogger(__name__)


# A uri as the store keeps it (in core, where the stages that record uris import it
# without importing the store).
stored_uri = fileio.absolute_uri


def _spec(artifact: TypedArtifact) -> ArtifactSpec:
    return ArtifactSpec(stored_uri(artifact.uri), artifact.type_name, dict(artifact.properties))


def _without_outputs(kept: dict[str, Any]) -> dict[str, Any]:
    """An execution's properties in the store: its outputs are the store's own artifacts."""
    kept.pop("outputs")
    return kept


def _plain(value: Any) -> Any:
    """JSON values only (a summary row's details may hold other objects: by ``str``, as
    the manifest writes them)."""
    return json.loads(json.dumps(value, default=str))


def _execution(stage: str, key: str, hit: CachedOutputs) -> Optional[Execution]:
    """A cache hit as the runner's Execution; None when its record cannot be read (written
    by another version: a miss, never an error)."""
    outputs = [
        {"type": a.type_name, "uri": a.uri, "properties": dict(a.properties)}
        for a in hit.outputs.values()
    ]
    return Execution.from_json(stage, key, hit.run_id or "", {**hit.properties, "outputs": outputs})


def stored_lookup(
    store: MetadataStore, no_cache: Collection[str] = ()
) -> Callable[[str, str], Optional[Execution]]:
    """Look-ups of the store alone that record nothing, as :meth:`RunRecords.lookup` makes
    them (the stages in ``no_cache`` are never found): the run's look-ahead
    (:mod:`beam_pipeline.engine.look_ahead`), made before this run's manifest exists. An
    earlier attempt of a resumed run recorded its executions in the store too."""
    skipped = frozenset(no_cache)

    def lookup(stage: str, key: str) -> Optional[Execution]:
        hit = None if stage in skipped else store.find_cached(stage, key)
        return _execution(stage, key, hit) if hit is not None else None

    return lookup


class RunRecords:
    """Execution records in the run's manifest and the metadata store (see the module
    docstring).

    Args:
      manifest: this run's manifest.
      store: the open metadata store, or None.
      run: this run as started in the store (None without a store).
      data: the run's input data as an external artifact (its path and content digest);
        None where no stage of the graph reads input data.
      no_cache: the stages never looked up.
      data_stage: the stage that reads the run's input data (recorded as its input).
    """

    def __init__(
        self,
        manifest: RunManifest,
        store: Optional[MetadataStore],
        run: Optional[RunRef],
        data: Optional[ArtifactSpec],
        no_cache: Collection[str] = (),
        data_stage: str = "",
    ):
        self._manifest = manifest
        self._store = store
        self._run = run
        self._data = data
        self._no_cache = frozenset(no_cache)
        self._data_stage = data_stage
        self._hits: dict[str, CachedOutputs] = {}
        self._running: dict[str, ExecutionRef] = {}

    def lookup(self, stage: str, key: str) -> Optional[Execution]:
        if stage in self._no_cache:
            return None
        found = self._manifest.lookup(stage, key)
        if found is not None or self._store is None:
            return found
        hit = self._store.find_cached(stage, key)
        if hit is None:
            return None
        self._hits[stage] = hit
        return _execution(stage, key, hit)

    def forget(self, stages: Sequence[str]) -> None:
        self._manifest.forget(stages)

    def reuse(self, execution: Execution) -> None:
        """The runner reuses ``execution``: one of another run is recorded in this run's
        manifest (a resume keeps it) and in the store as ``cached``."""
        hit = self._hits.pop(execution.stage, None)
        if hit is None or execution.run_id == self._manifest.run_dir.run_id:
            return  # this run's own earlier attempt: recorded already
        self._manifest.record(execution)
        self._store.record_cached(
            self._run,
            execution.stage,
            _plain(execution.built_from),
            execution.key,
            self._inputs(execution.stage, execution.inputs),
            hit,
        )

    def _inputs(self, stage: str, inputs: Sequence[TypedArtifact]) -> dict[str, Any]:
        specs: dict[str, Any] = {a.type_name: _spec(a) for a in inputs}
        if stage == self._data_stage:
            specs[DATA_ROLE] = self._data
        return specs

    def begin(
        self,
        stage: str,
        key: str,
        built_from: Mapping[str, Any],
        inputs: Sequence[TypedArtifact],
    ) -> None:
        """The stage starts: recorded as running (a killed run leaves it so)."""
        if self._store is not None:
            self._running[stage] = self._store.begin_execution(
                self._run, stage, _plain(built_from), key, self._inputs(stage, inputs)
            )

    def stop(
        self,
        stage: str,
        error: Optional[BaseException],
        reports: Sequence[StageReport] = (),
    ) -> None:
        """The stage stopped without a result: failed with ``error``, or canceled (None:
        a dry run, nothing to do). A store that cannot record it now is logged, never
        raised over the run's own error."""
        running = self._running.pop(stage, None)
        if running is None:
            return
        props = {"reports": _plain([r.to_json() for r in reports])}
        try:
            if error is None:
                self._store.cancel_execution(running, props)
            else:
                message = f"{type(error).__name__}: {error}"
                self._store.fail_execution(running, message, props)
        except Exception as e:  # noqa: BLE001 - the run's error is the one to show
            _LOG.warning("The metadata store could not record %s's end: %s", stage, e)

    def record(self, execution: Execution) -> None:
        self._manifest.record(execution)
        running = self._running.pop(execution.stage, None)
        if running is None:
            return
        self._store.publish_outputs(running, {a.type_name: _spec(a) for a in execution.outputs})
        self._store.complete_execution(
            running,
            job_ids=execution.job_ids,
            properties=_plain(_without_outputs(execution.to_json())),
        )
