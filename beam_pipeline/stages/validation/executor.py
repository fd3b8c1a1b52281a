"""The Validation stage's work (TFX's ``executor.py``): each split's statistics validated
against the schema (eval and test also for skew against train; train for drift against the
previous complete run's statistics), ``anomalies/<split>/SchemaDiff.pb`` and a readable
``summary.txt`` published, and the blocking-anomalies sentence kept in the execution's
outcome, so that a resumed run stops (or goes on) the same way without validating again.

Imported only when the stage runs: the declaration (``stage.py``) stays light for ``--help``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.types import Split
from beam_pipeline.engine.artifacts import Anomalies, Schema, Statistics, TypedArtifact
from beam_pipeline.engine.stage import Outputs, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus

if TYPE_CHECKING:
    from beam_pipeline.engine.stage import Stage

__all__ = ["find_baseline", "gone_sentence", "parameters", "previous_statistics", "run"]


def find_baseline(store, run_id: str) -> tuple[Optional[tuple[str, str]], list[tuple[str, str]]]:
    """The drift baseline in ``store``: (run id, statistics folder) of this pipeline's
    newest earlier run that completed (a run stopped by drift is no baseline) whose
    statistics are still on disk, or None; and (run id, folder) of each newer complete
    run whose statistics are recorded but gone from disk (moved away or deleted), newest
    first."""
    from beam_pipeline.metadata import ArtifactState, RunStatus
    from beam_pipeline.metadata.store import is_available

    gone = []
    for run in store.list_runs():  # newest first
        if run.run_id == run_id or run.status is not RunStatus.COMPLETE:
            continue
        missing = None
        for execution in store.run_executions(run.run_id) or ():
            for artifact in execution.outputs.values():
                if artifact.type_name != Statistics.__name__:
                    continue
                if is_available(artifact):
                    return (run.run_id, artifact.uri), gone
                if missing is None and artifact.state is ArtifactState.PUBLISHED:
                    missing = artifact.uri
        if missing is not None:
            gone.append((run.run_id, missing))
    return None, gone


def gone_sentence(gone: list[tuple[str, str]], flag_only: bool) -> str:
    """The one sentence that stops a run whose every drift baseline is gone from disk."""
    run_id, uri = gone[0]
    more = len(gone) - 1
    runs = "run" if more == 1 else "runs"
    earlier = f" (as are those of the {more} earlier complete {runs})" if more else ""
    return (
        f"Validation cannot check drift: the statistics of run {run_id}, this pipeline's "
        f"previous complete run, are gone from disk ({uri}){earlier}; put that folder back, "
        "or pass --ignore_anomalies to go on without the drift check"
        + (", or leave out --drift_threshold." if flag_only else ".")
    )


def _drift_baseline(
    ctx: StageContext, flag_only: bool
) -> tuple[Optional[str], list[tuple[str, str]]]:
    """(the drift baseline's statistics folder or None, the newer baselines gone).

    Raises:
      PipelineError: complete runs are recorded, every one's statistics are gone from
        disk, and ``--ignore_anomalies`` is not given.
    """
    from beam_pipeline.core.errors import PipelineError
    from beam_pipeline.stages.common.metadata_store import open_store

    with open_store(ctx) as store:
        if store is None:
            return None, []
        found, gone = find_baseline(store, ctx.run_dir.run_id)
    if found is None and gone and not ctx.config.validation.ignore_anomalies:
        raise PipelineError(gone_sentence(gone, flag_only))
    return (found[1] if found else None), gone


def previous_statistics(ctx: StageContext) -> Optional[str]:
    """The drift baseline: the statistics folder of this pipeline's newest earlier run that
    completed and whose statistics are still on disk, from the metadata store; None for
    the first run or without a store.

    Raises:
      PipelineError: every complete run's statistics are gone from disk (see
        :func:`gone_sentence`), unless ``--ignore_anomalies``.
    """
    return _drift_baseline(ctx, flag_only=False)[0]


def _compares(schema, comparator: str, default: Optional[float] = None) -> bool:
    """Whether any feature has a ``comparator`` threshold (the schema's or the flag's)."""
    return default is not None or any(f.HasField(comparator) for f in schema.feature)


def parameters(stage: Stage, ctx: StageContext) -> dict[str, Any]:
    """The stage's parameters: the thresholds and, where drift is checked, its baseline."""
    d = ctx.config.validation
    given_file = ctx.config.schema.file  # the --schema, checked before the run started
    given = Schema.read_file(given_file) if given_file else None
    schema_compares = given is not None and _compares(given, "drift_comparator")
    return {
        "drift_threshold": d.drift_threshold,
        "skew_threshold": d.skew_threshold,
        # The drift baseline: another run's statistics give another verdict. Only
        # comparators of the flag or of a --schema exist (inferred schemas set none).
        "drift_baseline": (
            _drift_baseline(ctx, flag_only=not schema_compares)[0]
            if d.drift_threshold is not None or schema_compares
            else None
        ),
    }


def run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    out: Outputs,
) -> StageResult:
    """The stage's run: Statistics + Schema -> Anomalies (and the blocking verdict)."""
    from beam_pipeline.stages.common.anomalies_file import DRIFT_BASELINE_FILE
    from beam_pipeline.stages.validation.anomalies import (
        blocking_anomalies,
        format_anomalies,
        is_blocking,
    )
    from beam_pipeline.stages.validation.checks import merge_anomalies, validate_statistics
    from beam_pipeline.stages.validation.distances import compare_distributions

    statistics = inputs[Statistics]
    stats = {s: statistics.read(s) for s in statistics.split_names}
    schema = inputs[Schema].read()
    tmp = out.folder(Anomalies)
    d = ctx.config.validation
    notes = []
    previous = None
    if _compares(schema, "drift_comparator", d.drift_threshold):
        where, gone = _drift_baseline(ctx, flag_only=not _compares(schema, "drift_comparator"))
        if where is None and gone:  # --ignore_anomalies: on without the drift check
            notes.append(
                f"drift: not checked (the previous complete run {gone[0][0]}'s statistics "
                f"are gone from disk: {gone[0][1]})"
            )
        elif where is None:
            notes.append("drift: no baseline (the first complete run of this pipeline)")
        else:
            baseline = Statistics(where)
            previous = {
                s: baseline.read(s)
                for s in statistics.split_names
                if fileio.exists(baseline.path(s))
            }
            notes.append(
                f"drift checked against {where}"
                + (
                    f" (the newer complete run {gone[0][0]}'s statistics are gone from disk: "
                    f"{gone[0][1]})"
                    if gone
                    else ""
                )
            )
            # For the report, which draws the baseline's distributions beside this run's.
            with fileio.open(fileio.join(tmp, DRIFT_BASELINE_FILE), "wb") as f:
                f.write(where.encode("utf-8"))
    skew = _compares(schema, "skew_comparator", d.skew_threshold)
    texts, by_split = [], {}
    for split, split_stats in stats.items():
        baseline = stats[Split.TRAIN] if split is not Split.TRAIN else None
        anomalies = validate_statistics(split_stats, schema, baseline_stats=baseline)
        # Drift is the train split's (TFX's: the new span against the previous one);
        # eval is checked against train (skew).
        if previous and split is Split.TRAIN and split in previous:
            merge_anomalies(
                anomalies,
                compare_distributions(
                    split_stats, previous[split], schema, "drift_comparator", d.drift_threshold
                ),
            )
        if skew and baseline is not None:
            merge_anomalies(
                anomalies,
                compare_distributions(
                    split_stats, baseline, schema, "skew_comparator", d.skew_threshold
                ),
            )
        by_split[split.value] = anomalies
        fileio.makedirs(fileio.join(tmp, split.value))
        with fileio.open(fileio.join(tmp, split.value, "SchemaDiff.pb"), "wb") as f:
            f.write(anomalies.SerializeToString())
        texts.append(format_anomalies(split.value, anomalies))
    text = "\n".join(t for t in [*texts, *notes] if t.strip())
    with fileio.open(fileio.join(tmp, "summary.txt"), "wb") as f:
        f.write((text or "no anomalies").encode("utf-8") + b"\n")
    artifact = out.uri(Anomalies)
    blocking = any(is_blocking(a) for a in by_split.values())
    stops = blocking and not ctx.config.validation.ignore_anomalies
    report = StageReport(
        "Validation",
        StageStatus.FAILED if stops else StageStatus.OK,
        artifact=artifact,
        # One line: "Split 'train': no anomalies; Split 'eval': ..." (each line's own
        # full stop would read ".;" before the separator).
        note="; ".join(line.strip().rstrip(".") for line in text.splitlines()) or "no anomalies",
    )
    error = None
    if blocking:
        error = (
            f"Validation found blocking anomalies in {blocking_anomalies(by_split)} "
            f"(details in {artifact}/summary.txt); fix the data or the --schema, or pass "
            "--ignore_anomalies to go on."
        )
        drifted = _comparator_details(by_split)
        if drifted:
            error = error[:-1] + f" ({drifted})."
    return StageResult(
        [report], outputs=(out.artifact(Anomalies),), outcome={"blocking_error": error}
    )


def _comparator_details(by_split) -> str:
    """The drift and skew anomalies' own sentences (feature, distance, threshold)."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    kinds = {
        anomalies_pb2.AnomalyInfo.COMPARATOR_L_INFTY_HIGH,
        anomalies_pb2.AnomalyInfo.COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH,
    }
    found = []
    for split, anomalies in by_split.items():
        for name in sorted(anomalies.anomaly_info):
            for reason in anomalies.anomaly_info[name].reason:
                if reason.type in kinds and " between " in reason.description:
                    found.append(f"{split} {name}: {reason.description.rstrip('.')}")
    return "; ".join(found)
