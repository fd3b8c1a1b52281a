"""The Validation stage: every split's statistics checked against the schema.

Each split is validated against the schema (eval and test also for drift/skew against
train); ``anomalies/<split>/SchemaDiff.pb`` and a readable ``summary.txt`` are published.
Blocking anomalies stop the run with exit code 3 unless ``--ignore_anomalies``; the
message is kept in the execution's outcome, so that a resumed run stops (or goes on) the
same way without validating again.

Example::

    result = ValidationStage().run(ctx, {Statistics: stats, Schema: schema}, out)
    result.outcome["blocking_error"]    # None, or the sentence the run stops with
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beam_pipeline.artifacts import Anomalies, Schema, Statistics, TypedArtifact
from beam_pipeline.core import fileio
from beam_pipeline.core.errors import EXIT_ANOMALIES, PipelineError
from beam_pipeline.core.types import Split
from beam_pipeline.stages.base import Input, Outputs, Stage, StageContext, StageName, StageResult
from beam_pipeline.summary import StageReport, StageStatus

__all__ = ["ValidationStage"]


class ValidationStage(Stage):
    """Statistics + Schema -> Anomalies (and the blocking-anomalies verdict)."""

    name = StageName.VALIDATION
    inputs = (Input(Statistics, key="statistics"), Input(Schema, key="schema"))
    outputs = (Anomalies,)

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        from beam_pipeline.anomalies import blocking_anomalies, format_anomalies, is_blocking
        from beam_pipeline.schema_gen import read_schema
        from beam_pipeline.validation import validate_statistics
        from transforms.statistics import read_statistics

        statistics = inputs[Statistics]
        stats = {s: read_statistics(statistics.path(s)) for s in statistics.split_names}
        schema = read_schema(inputs[Schema].file)
        tmp = out.folder(Anomalies)
        texts, by_split = [], {}
        for split, split_stats in stats.items():
            baseline = stats[Split.TRAIN] if split is not Split.TRAIN else None
            anomalies = validate_statistics(split_stats, schema, baseline_stats=baseline)
            by_split[split.value] = anomalies
            fileio.makedirs(fileio.join(tmp, split.value))
            with fileio.open(fileio.join(tmp, split.value, "SchemaDiff.pb"), "wb") as f:
                f.write(anomalies.SerializeToString())
            texts.append(format_anomalies(split.value, anomalies))
        text = "\n".join(t for t in texts if t.strip())
        with fileio.open(fileio.join(tmp, "summary.txt"), "wb") as f:
            f.write((text or "no anomalies").encode("utf-8") + b"\n")
        artifact = out.uri(Anomalies)
        blocking = any(is_blocking(a) for a in by_split.values())
        stops = blocking and not ctx.config.data.ignore_anomalies
        report = StageReport(
            "Validation",
            StageStatus.FAILED if stops else StageStatus.OK,
            artifact=artifact,
            # One clause per line; a line's own full stop would make ".;".
            note="; ".join(line.rstrip().removesuffix(".") for line in text.splitlines())
            or "no anomalies",
        )
        error = None
        if blocking:
            error = (
                f"Validation found blocking anomalies in {blocking_anomalies(by_split)} "
                f"(details in {artifact}/summary.txt); fix the data or the --schema, or pass "
                "--ignore_anomalies to go on."
            )
        return StageResult(
            [report], outputs=(out.artifact(Anomalies),), outcome={"blocking_error": error}
        )

    def check(self, ctx: StageContext, outcome: Mapping[str, Any]) -> None:
        """Stops the run (exit code 3) on blocking anomalies unless ``--ignore_anomalies``."""
        blocking = outcome.get("blocking_error")
        if blocking and not ctx.config.data.ignore_anomalies:
            raise PipelineError(blocking, exit_code=EXIT_ANOMALIES)
