"""The Evaluator's work (TFX's ``executor.py``): the baseline found in the metadata store
(the newest blessed ``Model`` still on disk that is not this run's own model), TFMA run over
the eval split by :mod:`beam_pipeline.stages.evaluator.evaluation`, ``evaluation/`` and
``blessing/`` published, and the verdict recorded on the model in the store (its ``blessed``
property, which the next run's baseline look-up reads).

Imported only when the stage runs: the declaration (``stage.py``) stays light for ``--help``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.artifacts import (
    Examples,
    Model,
    ModelBlessing,
    ModelEvaluation,
    Schema,
    Statistics,
    TransformGraph,
    TypedArtifact,
)
from beam_pipeline.engine.stage import Outputs, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.common.blessings import NO_LABEL_FIX
from beam_pipeline.stages.common.metadata_store import open_store

if TYPE_CHECKING:
    from beam_pipeline.engine.stage import Stage

__all__ = ["metrics_table", "run"]


def _baseline(ctx: StageContext, candidate: str) -> tuple[Optional[str], str]:
    """(the baseline model folder or None, how it was chosen)."""
    if not ctx.config.evaluator.baseline:
        return None, "no baseline (--no_eval_baseline): value thresholds only"
    with open_store(ctx) as store:
        if store is None:
            return None, "no metadata store (remote root, no --metadata_url): value thresholds only"
        found = store.latest_blessed_model()
    own = fileio.join(fileio.absolute_uri(candidate), "")
    if found is None or fileio.join(found.uri, "") == own:
        # Not "yet": a reused evaluation's note is read in later runs too, when one is.
        return None, "no model was blessed before it: value thresholds only (rubber stamp)"
    return found.uri, f"baseline {found.uri}"


def _record(ctx: StageContext, model_uri: str, blessed: bool) -> None:
    """Sets the model's ``blessed`` property in the store (the runner recorded the model as
    the Trainer's output): the next run's baseline look-up reads it.

    A model once blessed stays blessed: a later run that reuses the same model (its Trainer
    cached) and judges it under stricter thresholds says "NOT blessed" for that run, but
    does not take back the earlier blessing, as TFX's latest-blessed-model resolver counts
    any of a model's blessings. Otherwise warm start, ``--infer_model latest_blessed`` and
    the next baseline would lose the model the earlier run blessed."""
    with open_store(ctx) as store:
        lineage = store.lineage(fileio.absolute_uri(model_uri)) if store is not None else None
        if lineage is not None and (blessed or "blessed" not in lineage.artifact.custom_properties):
            store.set_custom_property(lineage.artifact.id, "blessed", blessed)


def _number(v: float) -> str:
    """A metric as the summary shows it: a count whole (333447, not 3.334e+05), a large
    value in e-notation (not 30 digits)."""
    from beam_pipeline.stages.evaluator.results import number

    return number(v)


def metrics_table(metrics: Mapping[str, Mapping[str, float]]) -> str:
    """The sliced metrics as rows: slice, then each metric."""
    names = sorted({n for row in metrics.values() for n in row})
    lines = ["slice".ljust(24) + "  ".join(n.ljust(12) for n in names)]
    for slice_name, row in sorted(metrics.items(), key=lambda kv: (kv[0] != "Overall", kv[0])):
        cells = [_number(row[n]).ljust(max(12, len(n))) if n in row else "-" for n in names]
        lines.append(slice_name.ljust(24) + "  ".join(cells))
    return "\n".join(lines)


def run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    out: Outputs,
) -> StageResult:
    """The stage's run: Model + Examples (+ Schema, TransformGraph) -> ModelEvaluation +
    ModelBlessing (the kernel skips it without a model: ``Input.skip_without``)."""
    from beam_pipeline.stages.evaluator import evaluation as evaluator

    e = ctx.config.evaluator
    model = inputs[Model]
    examples = inputs[Examples]
    if examples.split_names and e.eval_split not in examples.split_names:
        raise PipelineError(
            f"--eval_split={e.eval_split.value} names a split this run does not have (it "
            f"has {', '.join(s.value for s in examples.split_names)}); pass one of those."
        )
    facts = evaluator.model_facts(model.uri)  # loaded once for both uses below
    if not e.eval_config and facts.label_key is None:
        # A model exported by the module's own code (TFX's modules) records no label.
        note = f"not evaluated: the model in {model.uri} {NO_LABEL_FIX}"
        return StageResult([StageReport("Evaluator", StageStatus.SKIPPED, note=note)])
    schema_artifact = inputs.get(Schema)
    schema = schema_artifact.read() if schema_artifact is not None else None
    graph = inputs.get(TransformGraph)
    classes = evaluator.label_classes(graph.uri, facts.label_key) if graph else None
    stats = inputs.get(Statistics)
    files = [stats.path(split) for split in stats.split_names] if stats is not None else []
    values = evaluator.label_range(facts, files, schema)
    # Checked before the Beam job starts: a bad config (or a label whose kind cannot be
    # told) stops here with its fix.
    config = evaluator.build_eval_config(
        e.eval_config,
        model.uri,
        schema,
        e.slice_features,
        facts=facts,
        label_classes=classes,
        label_values=values,
    )
    kind = None if e.eval_config else evaluator.model_kind(facts, classes, values).value
    baseline, how = _baseline(ctx, model.uri)
    result = evaluator.run_evaluation(
        config,
        model.uri,
        baseline,
        examples.file_pattern(e.eval_split),
        out.folder(ModelEvaluation),
        ctx.options,
    )
    ModelBlessing(out.folder(ModelBlessing)).write(result)
    _record(ctx, model.uri, result.blessed)
    if result.blessed and result.reason:
        verdict = f"blessed: {result.why()} ({how})"
    elif result.blessed:
        verdict = f"blessed ({how})"
    else:
        verdict = f"NOT blessed: {result.why()} ({how})"
    overall = result.metrics.get("Overall", {})
    shown = ", ".join(f"{k}={_number(v)}" for k, v in sorted(overall.items()))
    report = StageReport(
        "Evaluator",
        StageStatus.OK,
        rows_in={e.eval_split.value: int(overall.get("example_count", 0))},
        artifact=out.uri(ModelEvaluation),
        note=f"{verdict}; overall {shown}",
        details={
            "blessed": result.blessed,
            "baseline": baseline,
            "failures": [f.__dict__ for f in result.failures],
            "reason": result.why(),
            "model_kind": kind,
            "metrics": result.metrics,
            "table_head": metrics_table(result.metrics),
        },
    )
    outputs = (
        out.artifact(ModelEvaluation),
        out.artifact(ModelBlessing, blessed=result.blessed, baseline=baseline),
    )
    return StageResult([report], outputs=outputs, outcome={"blessed": result.blessed})
