"""The Evaluator stage's declaration: its settings, inputs, outputs and hooks.

The work (the baseline look-up, TFMA, the blessing, the verdict in the store) is
:mod:`beam_pipeline.stages.evaluator.executor`, imported only when the stage runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.core.types import Split
from beam_pipeline.engine.artifacts import (
    Examples,
    Model,
    ModelBlessing,
    ModelEvaluation,
    Schema,
    Statistics,
    TransformGraph,
)
from beam_pipeline.engine.stage import (
    Input,
    Preflight,
    Stage,
    StageContext,
    switch,
)

if TYPE_CHECKING:
    from beam_pipeline.engine.history_entry import HistoryEntry
    from beam_pipeline.engine.report_sections import ReportSection, ReportView
    from beam_pipeline.engine.summary import StageReport

__all__ = ["EvaluatorConfig", "EvaluatorStage"]


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

    enabled: bool = switch(
        "Do not evaluate the model (nor push it: a push needs the Evaluator's blessing)."
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
        takes=(list, tuple),
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
    description = (
        "TensorFlow Model Analysis: sliced metrics, thresholds against the last blessed "
        "model: its own Beam job"
    )
    Config = EvaluatorConfig
    config_key = "evaluator"
    inputs = (
        Input(Model, key="model", optional=True, skip_without="no model was trained"),
        Input(Examples, key="examples"),
        Input(Schema, key="schema", optional=True),
        # Its transformed schema says how many classes the label has (the default
        # EvalConfig's model kind: one class, binary).
        Input(TransformGraph, key="transform_graph", optional=True),
        # The raw label's values: an integer label within {0, 1} is binary, beyond it
        # regression (kinds.model_kind).
        Input(Statistics, key="statistics", optional=True),
    )
    outputs = (ModelEvaluation, ModelBlessing)

    def preflight(self, run: Preflight) -> None:
        # A bad --eval_config (one that does not parse, a metric module that does not
        # import) stops the run before anything is written, not after the Trainer.
        e = run.config.evaluator
        if e.eval_config:
            from beam_pipeline.stages.evaluator.evaluation import check_eval_config_file

            check_eval_config_file(e.eval_config)

    def parameters(self, ctx: StageContext) -> dict[str, Any]:
        from beam_pipeline.engine.fingerprint import file_digest

        e = ctx.config.evaluator
        return {
            "eval_config": file_digest(e.eval_config) if e.eval_config else None,
            "eval_split": e.eval_split.value,
            "slice_features": list(e.slice_features),
            "baseline": e.baseline,
        }

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """The verdict, the metrics per slice beside the baseline's, TFMA's plots."""
        from beam_pipeline.stages.evaluator.report import evaluation_section

        return [evaluation_section(view)]

    # Its verdict, and its metrics on the Overall slice (TFMA over the whole eval split;
    # the Trainer's "metrics" are Keras's validation on --eval_steps batches).
    history_columns = {"blessed": None, "evaluation": {}}

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        # runs list's "blessed" and "evaluation" columns, runs diff's "evaluation" section;
        # runs show's model check and failed thresholds.
        from beam_pipeline.engine.history_entry import HistoryEntry
        from beam_pipeline.stages.common.blessings import verdict

        found = verdict(reports)
        if found is None:
            return HistoryEntry()
        overall = dict(((reports[0].details.get("metrics") or {}).get("Overall")) or {})
        return HistoryEntry(
            columns={"blessed": found["blessed"], "evaluation": overall},
            verdict=found,
            compared={"evaluation": overall} if overall else {},
        )
