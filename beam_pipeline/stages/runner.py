"""The runner loop: every stage of the graph, in order, looked up, run, published, recorded.

For each stage the runner:

1. resolves its inputs: the artifacts the earlier stages produced (or an earlier
   execution of theirs had produced), by type;
2. computes its cache key from the producing stages' keys and its parameters
   (:func:`beam_pipeline.stages.execution.cache_key`);
3. looks up an earlier execution with that key (:class:`ExecutionRecords.lookup`: this
   run's earlier attempt, or any earlier run in the metadata store) whose outputs are all
   still published: a hit reuses them (``reuse`` records it) and reports the stage
   ``cached``;
4. on a miss: forgets this stage and every later one in the records and removes what they
   had published in the run directory (a stage marked ``keeps_outputs_on_rerun`` keeps its
   own when it is the one rerunning: the Trainer's checkpoints), records that it
   ``begin``s, makes a staging folder per output, runs the stage, publishes the outputs it
   returned (marker last) and discards the other folders, or discards them all when it
   fails (``stop`` records the failure);
5. times it, adds its summary rows, and records the execution;
6. calls the stage's :meth:`Stage.check` (which may stop the run, e.g. on blocking
   anomalies) and stops after a stage that halts the run.

Example::

    run_stages(STAGE_GRAPH, ctx, RunRecords(manifest, store, run, data), summary)
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.artifacts import TypedArtifact
from beam_pipeline.core import fileio
from beam_pipeline.fingerprint import pipeline_code
from beam_pipeline.stages.base import Outputs, Stage, StageContext, StageFailed, StageResult
from beam_pipeline.stages.execution import Execution, ExecutionRecords, cache_key
from beam_pipeline.summary import RunSummary, StageReport, StageStatus

__all__ = ["run_stages"]

# The artifacts produced so far: type -> (the artifact, the key of the producing stage).
_Available = dict[type[TypedArtifact], tuple[TypedArtifact, str]]


def run_stages(
    graph: Sequence[Stage],
    ctx: StageContext,
    records: ExecutionRecords,
    summary: RunSummary,
) -> None:
    """Runs (or reuses) each stage of ``graph`` in order; see the module docstring.

    Args:
      graph: the stages in dependency order (``beam_pipeline.stages.STAGE_GRAPH``).
      ctx: the run's context.
      records: where earlier executions are looked up and new ones recorded.
      summary: the run's summary; each stage's rows are appended.

    Raises:
      Whatever a stage raises (after its rows joined the summary), and what a stage's
      :meth:`Stage.check` raises to stop the run.
    """
    available: _Available = {}
    for index, stage in enumerate(graph):
        inputs, built_from = _resolve(stage, ctx, available)
        key = cache_key(stage.name, built_from)
        execution = _reusable(records.lookup(stage.name, key))
        if execution is not None:
            records.reuse(execution)
            cached = _cached_rows(execution, ctx.run_dir.run_id)
            summary.stages.extend(cached)
            _announce(ctx, cached)
        else:
            _forget(graph[index:], ctx, records)
            started = datetime.datetime.now()
            used = tuple(
                a for a, _ in (available[i.type] for i in stage.inputs if i.type in available)
            ) + tuple(a for a in inputs.values() if a.type_name in built_from.get("resolved", {}))
            records.begin(stage.name, key, built_from, used)
            first = len(summary.stages)
            ctx.events.stage_started(stage.name.value)
            try:
                result = _run(stage, ctx, inputs, summary)
            except BaseException as error:
                _announce(ctx, summary.stages[first:])  # a failed stage's rows, if any
                records.stop(stage.name, error)
                raise
            summary.stages.extend(result.reports)
            _announce(ctx, result.reports)
            if result.halt:
                records.stop(stage.name, None, result.reports)
                return
            execution = Execution(
                stage=stage.name,
                key=key,
                built_from=built_from,
                inputs=used,
                outputs=tuple(result.outputs),
                reports=list(result.reports),
                outcome=dict(result.outcome),
                run_id=ctx.run_dir.run_id,
                started=started.isoformat(timespec="seconds"),
                finished=datetime.datetime.now().isoformat(timespec="seconds"),
            )
            records.record(execution)
        for artifact in execution.outputs:
            available[type(artifact)] = (artifact, key)
        stage.check(ctx, execution.outcome)


def _announce(ctx: StageContext, rows: Sequence[StageReport]) -> None:
    """Tells the run's listeners (the progress display) of each summary row a stage added."""
    for row in rows:
        ctx.events.stage_finished(row)


def _resolve(
    stage: Stage, ctx: StageContext, available: _Available
) -> tuple[dict[type[TypedArtifact], TypedArtifact], dict[str, Any]]:
    """The stage's input artifacts and what its key is built from."""
    inputs, built_from = {}, {}
    for spec in stage.inputs:
        found = available.get(spec.type)
        if found is None and not spec.optional:
            raise RuntimeError(f"{stage.name.value} needs a {spec.type.__name__}; none was made")
        if found is not None:
            inputs[spec.type] = found[0]
        if spec.key is not None:
            built_from[spec.key] = found[1] if found is not None else None
    built_from.update(stage.parameters(ctx))
    # Artifacts of earlier runs found in the store (Stage.resolved_inputs): by type and uri.
    resolved = stage.resolved_inputs(ctx)
    for artifact in resolved:
        inputs[type(artifact)] = artifact
    if resolved:
        built_from["resolved"] = {a.type_name: a.uri for a in resolved}
    # The code that runs it: another version's (or an edited checkout's) result is not
    # this code's result (beam_pipeline.fingerprint.pipeline_code).
    built_from["pipeline_code"] = pipeline_code()
    return inputs, built_from


def _reusable(execution: Optional[Execution]) -> Optional[Execution]:
    """The execution when every output of it is still published (else a miss)."""
    if execution is None or not all(a.is_published() for a in execution.outputs):
        return None
    return execution


def _cached_rows(execution: Execution, run_id: str) -> list[StageReport]:
    """An earlier execution's summary rows, as CACHED (SKIPPED ones stay: decided again)."""
    rows = []
    for earlier in execution.reports:
        row = StageReport.from_json(earlier.to_json())
        row.seconds = 0.0
        if row.status is not StageStatus.SKIPPED:
            row.status = StageStatus.CACHED
            if execution.run_id == run_id:
                note = f"kept from an earlier attempt of run {execution.run_id}"
            else:
                note = f"reused from run {execution.run_id}"
            row.note = f"{note}; {row.note}" if row.note else note
            row.details = dict(row.details, cached_from=execution.finished)
        rows.append(row)
    return rows


def _forget(rerun: Sequence[Stage], ctx: StageContext, records: ExecutionRecords) -> None:
    """Forgets the stages that rerun and removes what they had published in this run."""
    records.forget([s.name for s in rerun])
    for i, stage in enumerate(rerun):
        if i == 0 and stage.keeps_outputs_on_rerun:
            continue
        for artifact in stage.outputs:
            path = ctx.run_dir.path(artifact.FOLDER)
            if fileio.exists(path):
                fileio.rmtree(path)


def _run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    summary: RunSummary,
) -> StageResult:
    """Runs the stage in its staging folders; publishes its outputs or discards them."""
    run_dir = ctx.run_dir
    staging = (
        {} if stage.publishes_itself else {a: run_dir.new_staging(a.FOLDER) for a in stage.outputs}
    )
    started = time.time()
    try:
        result = stage.run(ctx, inputs, Outputs(run_dir, staging))
    except StageFailed as failed:
        for artifact, folder in staging.items():
            if artifact in failed.publish:
                run_dir.publish(artifact.FOLDER, folder)
            else:
                run_dir.discard(folder)
        _time(failed.reports, started)
        summary.stages.extend(failed.reports)
        raise failed.error from failed.error.__cause__
    except BaseException:
        for folder in staging.values():
            run_dir.discard(folder)
        raise
    made = {type(a) for a in result.outputs}
    for artifact, folder in staging.items():
        if artifact in made and not result.halt:
            run_dir.publish(artifact.FOLDER, folder)
        else:
            run_dir.discard(folder)
    _time(result.reports, started)
    return result


def _time(reports: Sequence[StageReport], started: float) -> None:
    """The stage's own row (its first) gets the stage's wall time, publishing included."""
    if reports and reports[0].status in (StageStatus.OK, StageStatus.FAILED):
        reports[0].seconds = round(time.time() - started, 3)
