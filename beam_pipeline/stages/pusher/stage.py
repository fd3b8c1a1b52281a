"""The Pusher stage's declaration: a model blessed by the Evaluator and the InfraValidator
is pushed (the work: :mod:`beam_pipeline.stages.pusher.executor`, imported when it runs).

A model that is not blessed is not pushed and the run still succeeds, its summary saying
why; with ``--require_blessing`` the run then exits with :data:`EXIT_NOT_BLESSED`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.engine.artifacts import (
    InfraBlessing,
    Model,
    ModelBlessing,
    PushedModel,
)
from beam_pipeline.engine.stage import Input, Stage, StageContext

if TYPE_CHECKING:
    from beam_pipeline.engine.history_entry import HistoryEntry
    from beam_pipeline.engine.report_sections import ReportSection, ReportView
    from beam_pipeline.engine.summary import StageReport

__all__ = ["PusherConfig", "PusherStage", "EXIT_NOT_BLESSED"]

EXIT_NOT_BLESSED = 4


@dataclasses.dataclass(frozen=True)
class PusherConfig:
    """Settings of the Pusher stage."""

    destination: str = setting(
        "",
        flag="push_destination",
        help="Folder or gs:// path for <version>/ folders.",
        path=True,
    )
    require_blessing: bool = setting(
        False,
        flag="require_blessing",
        help="Exit non-zero when the model is not blessed.",
        kind="switch",
    )


class PusherStage(Stage):
    """Model + ModelBlessing + InfraBlessing -> PushedModel (a record of the push)."""

    name = "Pusher"
    description = "a model blessed by both copied to `<destination>/<version>/`: launcher"
    Config = PusherConfig
    config_key = "pusher"
    inputs = (
        Input(Model, key="model", optional=True, skip_without="no model was trained"),
        Input(ModelBlessing, key="blessing", optional=True),
        Input(InfraBlessing, key="infra_blessing", optional=True),
    )
    outputs = (PushedModel,)
    reads = ("evaluator.enabled",)  # why a model without a blessing is not pushed

    def parameters(self, ctx: StageContext) -> dict[str, Any]:
        return {"destination": ctx.config.pusher.destination}

    def check(self, ctx: StageContext, outcome: Mapping[str, Any]) -> None:
        if ctx.config.pusher.require_blessing and not outcome.get("blessed", False):
            raise PipelineError(
                "The model is not blessed, so it was not pushed (--require_blessing); the "
                "summary's Evaluator and InfraValidator rows say which check failed.",
                exit_code=EXIT_NOT_BLESSED,
            )

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """Its record (where the model went, or why not), added to the evaluation's
        section."""
        from beam_pipeline.engine.report_sections import ReportSection, json_key_values

        parts = json_key_values(view, PushedModel)
        return [ReportSection("evaluation", "Evaluation", (PushedModel,), parts)]

    history_columns = {"pushed": None}  # whether it pushed the model (history())

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        # runs list's "pushed" column; runs show's model check.
        from beam_pipeline.engine.history_entry import HistoryEntry
        from beam_pipeline.stages.common.blessings import verdict

        found = verdict(reports, "pushed")
        if found is None:
            return HistoryEntry()
        return HistoryEntry(columns={"pushed": found["pushed"]}, verdict=found)
