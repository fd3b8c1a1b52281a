"""The Pusher stage: a model blessed by the Evaluator and the InfraValidator is pushed.

The copy is :func:`beam_pipeline.stages.pusher.push.push_model` (``<destination>/<version>/``,
atomic); this unit decides whether to push and publishes ``pushed_model/pushed.json``, whose
artifact the runner records in the metadata store with the push's destination and version.
A model that is not blessed is not pushed and the run still succeeds, its summary saying
why; with ``--require_blessing`` the run then exits with :data:`EXIT_NOT_BLESSED`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.engine.artifacts import (
    InfraBlessing,
    Model,
    ModelBlessing,
    PushedModel,
    TypedArtifact,
)
from beam_pipeline.engine.history_entry import HistoryEntry
from beam_pipeline.engine.report_sections import ReportSection, ReportView, json_key_values
from beam_pipeline.engine.stage import Input, Outputs, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.common.blessings import (
    NO_LABEL_FIX,
    read_blessing,
    read_infra_result,
    skip_without_model,
    verdict,
)

__all__ = ["PusherConfig", "PusherStage", "EXIT_NOT_BLESSED", "PUSHED_FILE"]

EXIT_NOT_BLESSED = 4
PUSHED_FILE = "pushed.json"


def _why_not(inputs: Mapping[type[TypedArtifact], TypedArtifact], ctx: StageContext) -> str:
    """Why the model may not be pushed ('' when it may)."""
    blessing = inputs.get(ModelBlessing)
    if blessing is None and not ctx.config.evaluator.enabled:
        return "the Evaluator did not run (--no_evaluator)"
    if blessing is None:
        # The Evaluator's one other reason to skip a trained model (stages/evaluator/stage.py).
        return f"the Evaluator did not evaluate it: the model {NO_LABEL_FIX}"
    verdict = read_blessing(blessing.uri)
    if verdict is None or not verdict.blessed:
        return f"the Evaluator did not bless it ({verdict.why() if verdict else 'no verdict'})"
    infra = inputs.get(InfraBlessing)
    if infra is None:
        return "the InfraValidator did not run (--no_infra_validator)"
    served = read_infra_result(infra.uri)
    if served is None or not served.blessed:
        problems = "; ".join(served.problems) if served else "no verdict"
        return f"the InfraValidator did not bless it ({problems})"
    return ""


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
    Config = PusherConfig
    config_key = "pusher"
    inputs = (
        Input(Model, key="model", optional=True),
        Input(ModelBlessing, key="blessing", optional=True),
        Input(InfraBlessing, key="infra_blessing", optional=True),
    )
    outputs = (PushedModel,)

    def parameters(self, ctx: StageContext) -> dict[str, Any]:
        return {"destination": ctx.config.pusher.destination}

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        from beam_pipeline.stages.pusher.push import push_model

        skipped = skip_without_model("Pusher", inputs)
        if skipped is not None:
            return skipped

        destination = ctx.config.pusher.destination
        why_not = _why_not(inputs, ctx)
        record: dict[str, Any] = {"pushed": False, "destination": destination or None}
        if why_not:
            record["reason"] = why_not
            note = f"not pushed: {why_not}"
        elif not destination:
            record["reason"] = "no --push_destination"
            note = "blessed; not pushed: no --push_destination"
        else:
            model = inputs[Model]
            pushed = push_model(model.uri, destination)
            version = int(pushed.rstrip("/").rsplit("/", 1)[-1])
            record.update(pushed=True, uri=pushed, version=version)
            note = f"pushed to {pushed} (version {version})"
        fileio.write_file(fileio.join(out.folder(PushedModel), PUSHED_FILE), json.dumps(record))
        status = StageStatus.OK if record["pushed"] else StageStatus.SKIPPED
        report = StageReport(
            "Pusher", status, artifact=record.get("uri"), note=note, details=dict(record)
        )
        artifact = out.artifact(
            PushedModel,
            pushed=record["pushed"],
            destination=destination or None,
            version=record.get("version"),
        )
        return StageResult([report], outputs=(artifact,), outcome={"blessed": not why_not})

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
        parts = json_key_values(view, PushedModel)
        return [ReportSection("evaluation", "Evaluation", (PushedModel,), parts)]

    history_columns = {"pushed": None}  # whether it pushed the model (history())

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        # runs list's "pushed" column; runs show's model check.
        found = verdict(reports, "pushed")
        if found is None:
            return HistoryEntry()
        return HistoryEntry(columns={"pushed": found["pushed"]}, verdict=found)
