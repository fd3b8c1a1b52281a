"""The runner loop: every stage of the graph, in order, looked up, run, published, recorded.

For each stage the runner:

1. resolves its inputs: the artifacts the earlier stages produced (or an earlier
   execution of theirs had produced), by type;
2. computes its cache key from the producing stages' keys and its parameters
   (:func:`beam_pipeline.engine.execution.cache_key`);
3. looks up an earlier execution with that key (:class:`ExecutionRecords.lookup`: this
   run's earlier attempt, or any earlier run in the metadata store) whose outputs are all
   still published and hold the files recorded when they were published (sizes, and
   digests of the small files: :mod:`beam_pipeline.engine.contents`): a hit reuses them
   (``reuse`` records it) and reports the stage ``cached``; a damaged one is a miss whose
   rerun's row says which run's artifact changed;
4. on a miss: forgets this stage and every later one in the records and removes what they
   had published in the run directory (a stage marked ``keeps_outputs_on_rerun`` keeps its
   own when it is the one rerunning: the Trainer's checkpoints), records that it
   ``begin``s, makes a staging folder per output, runs the stage, publishes the outputs it
   returned (marker last), recording their files, and discards the other folders, or
   discards them all when it fails (``stop`` records the failure);
5. times it, adds its summary rows, and records the execution;
6. calls the stage's :meth:`Stage.check` (which may stop the run, e.g. on blocking
   anomalies) and stops after a stage that halts the run.

Example::

    run_stages(STAGE_GRAPH, ctx, RunRecords(manifest, store, run, data), summary)
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import first_line, user_error
from beam_pipeline.engine.artifacts import TypedArtifact
from beam_pipeline.engine.contents import changed, describe
from beam_pipeline.engine.execution import Execution, ExecutionRecords, cache_key
from beam_pipeline.engine.fingerprint import pipeline_code
from beam_pipeline.engine.stage import Outputs, Stage, StageContext, StageFailed, StageResult
from beam_pipeline.engine.summary import RunSummary, StageReport, StageStatus

__all__ = ["run_stages"]

# The artifact property that records its files when published (beam_pipeline.engine.contents).
FILES_PROPERTY = "files"

# The longest error note of a failed stage's row.
_MAX_NOTE = 500

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
        execution, damaged = _reusable(records.lookup(stage.name, key))
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
            ctx.events.stage_started(stage.name)
            try:
                result = _run(stage, ctx, inputs, summary)
            except BaseException as error:
                if len(summary.stages) == first:  # a row for the failed stage all the same
                    summary.stages.append(_failed_row(stage, ctx, error, started))
                _announce(ctx, summary.stages[first:])  # a failed stage's rows
                records.stop(stage.name, error)
                raise
            shown = _noted(result.reports, damaged)
            summary.stages.extend(shown)
            _announce(ctx, shown)
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


def _failed_row(
    stage: Stage, ctx: StageContext, error: BaseException, started: datetime.datetime
) -> StageReport:
    """The summary row of a stage that failed without one: its error in one line (the
    sentence the CLI prints for it, when it has one)."""
    if isinstance(error, KeyboardInterrupt):
        note = "interrupted"
    else:
        root = ctx.config.pipeline_root if ctx.config is not None else None
        sentence = user_error(error, root) if root is not None else None
        note = str(sentence) if sentence is not None else f"{type(error).__name__}: "
        note = note if sentence is not None else note + first_line(error)
        if len(note) > _MAX_NOTE:
            note = note[: _MAX_NOTE - 3] + "..."
    seconds = round((datetime.datetime.now() - started).total_seconds(), 3)
    # ExampleGen+Statistics fails as its first stage: ExampleGen.
    name = stage.name.split("+", 1)[0]
    return StageReport(name, StageStatus.FAILED, seconds=seconds, note=note)


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
            raise RuntimeError(f"{stage.name} needs a {spec.type.__name__}; none was made")
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
    # this code's result (beam_pipeline.engine.fingerprint.pipeline_code).
    built_from["pipeline_code"] = pipeline_code()
    return inputs, built_from


def _reusable(execution: Optional[Execution]) -> tuple[Optional[Execution], str]:
    """The execution when every output of it is still published and holds what it held
    when published (else a miss), and why a published one is not reused ("" if none).

    Each output's files were recorded when it was published (:func:`_with_contents`); a
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


def _noted(rows: Sequence[StageReport], note: str) -> list[StageReport]:
    """The rows for this run's summary, the first one saying why the stage reran (a copy:
    the execution's own rows, which a later run may reuse, do not say it)."""
    if not note or not rows:
        return list(rows)
    first = StageReport.from_json(rows[0].to_json())
    first.note = f"{note}; {first.note}" if first.note else note
    return [first, *rows[1:]]


def _with_contents(artifact: TypedArtifact) -> TypedArtifact:
    """The published artifact with its files recorded (what :func:`_reusable` checks)."""
    if not fileio.isdir(artifact.uri):
        return artifact
    files = describe(artifact.uri)
    return dataclasses.replace(artifact, properties={**artifact.properties, FILES_PROPERTY: files})


def _cached_rows(execution: Execution, run_id: str) -> list[StageReport]:
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
    if not result.halt:
        result = dataclasses.replace(result, outputs=[_with_contents(a) for a in result.outputs])
    _time(result.reports, started)
    return result


def _time(reports: Sequence[StageReport], started: float) -> None:
    """The stage's own row (its first) gets the stage's wall time, publishing included."""
    if reports and reports[0].status in (StageStatus.OK, StageStatus.FAILED):
        reports[0].seconds = round(time.time() - started, 3)
