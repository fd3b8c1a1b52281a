"""The InfraValidator stage's declaration: the model served from a sandbox process (or by
the TF Serving server at ``--serving_endpoint``) before it is pushed (the work:
:mod:`beam_pipeline.stages.infra_validator.executor`, imported when it runs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.engine.artifacts import Examples, InfraBlessing, Model
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.engine.stage import Input, Stage, StageContext, switch

if TYPE_CHECKING:
    from beam_pipeline.engine.history_entry import HistoryEntry
    from beam_pipeline.engine.report_sections import ReportSection, ReportView
    from beam_pipeline.engine.summary import StageReport

__all__ = ["InfraValidatorConfig", "InfraValidatorStage"]


@dataclasses.dataclass(frozen=True)
class InfraValidatorConfig:
    """Settings of the serving check (``serving_endpoint``: ``HOST:PORT`` of a running TF
    Serving server's gRPC API that serves the model; "": the sandbox)."""

    enabled: bool = switch("Do not load and serve the model as a check (nor push it).")
    load_timeout: float = setting(
        60.0, flag="infra_load_timeout", help="Seconds to load (default 60).", kind="float"
    )
    serving_endpoint: str = setting(
        "",
        flag="serving_endpoint",
        help="HOST:PORT of a TF Serving server (gRPC) serving the model: validate it there.",
    )
    serving_model_name: str = setting(
        "model",
        flag="serving_model_name",
        help="The model's name on that server (default model).",
    )

    def __post_init__(self):
        import math
        import re

        t = self.load_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf:
            raise PipelineError(
                f"--infra_load_timeout={t!r} is not a positive number of seconds; pass e.g. "
                "--infra_load_timeout=60."
            )
        endpoint = self.serving_endpoint
        if endpoint and not re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[^\s:/\[\]]+):\d{1,5}", endpoint):
            raise PipelineError(
                f"--serving_endpoint={endpoint} is not HOST:PORT; pass TF Serving's gRPC "
                "address, e.g. --serving_endpoint=localhost:8500."
            )
        if not self.serving_model_name:
            raise PipelineError(
                "--serving_model_name is empty; pass the name the server serves the model "
                "as (its --model_name; TF Serving's Docker image: model)."
            )


class InfraValidatorStage(Stage):
    """Model + Examples -> InfraBlessing (and the model's warm-up file)."""

    name = "InfraValidator"
    description = (
        "the model loaded and queried as TF Serving would, in a sandbox or a real server: "
        "a fork of the launcher's fork server"
    )
    Config = InfraValidatorConfig
    config_key = "infra_validator"
    inputs = (
        Input(Model, key="model", optional=True, skip_without="no model was trained"),
        Input(Examples, key="examples"),
    )
    outputs = (InfraBlessing,)
    reads = ("evaluator.eval_split",)  # it queries the model with the evaluated split
    forks = True  # its sandbox

    def check_settings(self, config: PipelineConfig, options: Any) -> None:
        settings = config.infra_validator
        if settings.serving_endpoint:
            # The serving check's server must answer now, not after the training.
            from beam_pipeline.stages.infra_validator.endpoint import check_endpoint

            check_endpoint(settings.serving_endpoint)

    def parameters(self, ctx: StageContext) -> dict:
        e = ctx.config.infra_validator
        split = ctx.config.evaluator.eval_split  # the split the model is evaluated on
        params = {"eval_split": split.value, "load_timeout": e.load_timeout}
        if e.serving_endpoint:  # only then: the sandbox's cache keys stay as they were
            params.update(endpoint=e.serving_endpoint, model_name=e.serving_model_name)
        return params

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """Its verdict's files, added to the evaluation's section."""
        from beam_pipeline.engine.report_sections import ReportSection, json_key_values

        markers = {"INFRA_BLESSED": ("blessed", True), "INFRA_NOT_BLESSED": ("blessed", False)}
        parts = json_key_values(view, InfraBlessing, markers=markers)
        return [ReportSection("evaluation", "Evaluation", (InfraBlessing,), parts)]

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        from beam_pipeline.engine.history_entry import HistoryEntry
        from beam_pipeline.stages.common.blessings import verdict

        return HistoryEntry(verdict=verdict(reports))  # runs show's model check
