"""The Evaluator stage: TFMA over the eval split, against the latest blessed model.

The work is :mod:`beam_pipeline.stages.evaluator.evaluation` (EvalConfig, the TFMA Beam job,
the blessing); this unit finds the baseline in the metadata store (the newest blessed
``Model`` that is still on disk and is not this run's own model), hands TFMA the run's model
and examples, publishes ``evaluation/`` and ``blessing/``, and records the verdict in the
store (the model's ``blessed`` property, which the next run's baseline look-up reads).

The runner records this execution and its outputs in the metadata store like any stage's;
this unit adds the verdict to the Model artifact the Trainer's execution recorded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.core.types import Split
from beam_pipeline.engine.artifacts import (
    Examples,
    Model,
    ModelBlessing,
    ModelEvaluation,
    Schema,
    TransformGraph,
    TypedArtifact,
)
from beam_pipeline.engine.fingerprint import file_digest
from beam_pipeline.engine.history_entry import HistoryEntry
from beam_pipeline.engine.report_sections import ReportSection, ReportView
from beam_pipeline.engine.stage import Input, Outputs, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.common.blessings import NO_LABEL_FIX, skip_without_model, verdict
from beam_pipeline.stages.common.store import open_store

__all__ = ["EvaluatorConfig", "EvaluatorStage"]


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
    the Trainer's output): the next run's baseline look-up reads it."""
    with open_store(ctx) as store:
        lineage = store.lineage(fileio.absolute_uri(model_uri)) if store is not None else None
        if lineage is not None:
            store.set_custom_property(lineage.artifact.id, "blessed", blessed)


def _number(v: float) -> str:
    """A metric as the summary shows it: a count whole (333447, not 3.334e+05)."""
    return str(int(v)) if float(v).is_integer() else f"{v:.4g}"


def metrics_table(metrics: Mapping[str, Mapping[str, float]]) -> str:
    """The sliced metrics as rows: slice, then each metric."""
    names = sorted({n for row in metrics.values() for n in row})
    lines = ["slice".ljust(24) + "  ".join(n.ljust(12) for n in names)]
    for slice_name, row in metrics.items():
        cells = [_number(row[n]).ljust(max(12, len(n))) if n in row else "-" for n in names]
        lines.append(slice_name.ljust(24) + "  ".join(cells))
    return "\n".join(lines)


def _slice_features(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return tuple(str(v).strip() for v in items if str(v).strip())


def _split(value: Any) -> Split:
    try:
        return Split(value)
    except ValueError:
        raise PipelineError(
            f"--eval_split={value!r} is not a split; use one of "
            f"{', '.join(s.value for s in Split)}."
        ) from None


@dataclasses.dataclass(frozen=True)
class EvaluatorConfig:
    """Settings of the Evaluator (``eval_config``: a TFMA EvalConfig file, protobuf text or
    JSON; default: derived from the model, see :mod:`beam_pipeline.stages.evaluator.evaluation`)."""

    enabled: bool = setting(
        True,
        flag="evaluator",
        help="Do not evaluate the model (nor push it: a push needs the Evaluator's blessing).",
        kind="switch",
    )
    eval_config: Optional[str] = setting(
        None,
        flag="eval_config",
        help="TFMA EvalConfig file (text or JSON); default: derived.",
        path=True,
    )
    eval_split: Split = setting(
        Split.EVAL,
        flag="eval_split",
        help="Split to evaluate and validate on (default eval).",
        parse=_split,
    )
    slice_features: tuple[str, ...] = setting(
        (),
        flag="eval_slice_features",
        help="Comma-separated features to slice metrics by.",
        parse=_slice_features,
    )
    baseline: bool = setting(
        True,
        flag="eval_baseline",
        help="Do not compare with the latest blessed model.",
        kind="switch",
    )


class EvaluatorStage(Stage):
    """Model + Examples + Schema -> ModelEvaluation + ModelBlessing."""

    name = "Evaluator"
    Config = EvaluatorConfig
    config_key = "evaluator"
    inputs = (
        Input(Model, key="model", optional=True),
        Input(Examples, key="examples"),
        Input(Schema, key="schema", optional=True),
        # Its transformed schema says how many classes the label has (the default
        # EvalConfig's model kind: one class, binary).
        Input(TransformGraph, key="transform_graph", optional=True),
    )
    outputs = (ModelEvaluation, ModelBlessing)

    def parameters(self, ctx: StageContext) -> dict[str, Any]:
        e = ctx.config.evaluator
        return {
            "eval_config": file_digest(e.eval_config) if e.eval_config else None,
            "eval_split": e.eval_split.value,
            "slice_features": list(e.slice_features),
            "baseline": e.baseline,
        }

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        from beam_pipeline.stages.common.schema_file import read_schema
        from beam_pipeline.stages.evaluator import evaluation as evaluator

        e = ctx.config.evaluator
        skipped = skip_without_model("Evaluator", inputs, "" if e.enabled else "--no_evaluator")
        if skipped is not None:
            return skipped
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
        schema = read_schema(schema_artifact.file) if schema_artifact is not None else None
        graph = inputs.get(TransformGraph)
        classes = evaluator.label_classes(graph.uri, facts.label_key) if graph else None
        # Checked before the Beam job starts: a bad config stops here with its fix.
        config = evaluator.build_eval_config(
            e.eval_config, model.uri, schema, e.slice_features, facts=facts, label_classes=classes
        )
        kind = None if e.eval_config else evaluator.model_kind(facts, classes).value
        baseline, how = _baseline(ctx, model.uri)
        result = evaluator.run_evaluation(
            config,
            model.uri,
            baseline,
            examples.file_pattern(e.eval_split),
            out.folder(ModelEvaluation),
            ctx.options,
        )
        evaluator.write_blessing(out.folder(ModelBlessing), result)
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

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """The verdict, the metrics per slice beside the baseline's, TFMA's plots."""
        from beam_pipeline.stages.evaluator.report import evaluation_section

        return [evaluation_section(view)]

    history_columns = {"blessed": None}  # its verdict (history())

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        # runs list's "blessed" column; runs show's model check and failed thresholds.
        found = verdict(reports)
        if found is None:
            return HistoryEntry()
        return HistoryEntry(columns={"blessed": found["blessed"]}, verdict=found)
