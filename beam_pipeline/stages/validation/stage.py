"""The Validation stage's declaration: every split's statistics checked against the schema
(the work: :mod:`beam_pipeline.stages.validation.executor`, imported when it runs).

Blocking anomalies stop the run with exit code 3 unless ``--ignore_anomalies``.

Example::

    result = ValidationStage().run(ctx, {Statistics: stats, Schema: schema}, out)
    result.outcome["blocking_error"]    # None, or the sentence the run stops with
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core.errors import EXIT_ANOMALIES, PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.engine.artifacts import Anomalies, Schema, Statistics
from beam_pipeline.engine.stage import Input, Stage, StageContext

if TYPE_CHECKING:
    from beam_pipeline.engine.report_sections import ReportSection, ReportView

__all__ = ["ValidationConfig", "ValidationStage"]


@dataclasses.dataclass(frozen=True)
class ValidationConfig:
    """When anomalies stop the run: drift and skew thresholds, and whether to go on."""

    ignore_anomalies: bool = setting(
        False, flag="ignore_anomalies", help="Report anomalies, go on.", kind="switch"
    )
    drift_threshold: Optional[float] = setting(
        None,
        flag="drift_threshold",
        help="Drift threshold of every feature without a schema drift_comparator, against "
        "the previous run (L-infinity for categorical, Jensen-Shannon for numeric).",
        kind="float",
    )
    skew_threshold: Optional[float] = setting(
        None,
        flag="skew_threshold",
        help="The same for skew_comparator: eval against train.",
        kind="float",
    )

    def __post_init__(self):
        for flag in ("drift_threshold", "skew_threshold"):
            t = getattr(self, flag)
            if t is not None and (
                isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t <= 1
            ):
                raise PipelineError(
                    f"--{flag}={t!r} is out of range: pass a distance from 0 to 1, e.g. 0.1."
                )


class ValidationStage(Stage):
    """Statistics + Schema -> Anomalies (and the blocking-anomalies verdict)."""

    name = "Validation"
    description = "every split against the schema; blocking anomalies stop the run: launcher"
    Config = ValidationConfig
    config_key = "validation"
    inputs = (Input(Statistics, key="statistics"), Input(Schema, key="schema"))
    outputs = (Anomalies,)
    reads = ("schema.file",)  # a --schema's drift comparators ask for a drift baseline

    def parameters(self, ctx: StageContext) -> dict[str, Any]:
        from beam_pipeline.stages.validation import executor

        return executor.parameters(self, ctx)

    def check(self, ctx: StageContext, outcome: Mapping[str, Any]) -> None:
        """Stops the run (exit code 3) on blocking anomalies unless ``--ignore_anomalies``."""
        blocking = outcome.get("blocking_error")
        if blocking and not ctx.config.validation.ignore_anomalies:
            raise PipelineError(blocking, exit_code=EXIT_ANOMALIES)

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """Each anomaly per split and feature."""
        from beam_pipeline.stages.validation.report import anomalies_section

        return [anomalies_section(view)]
