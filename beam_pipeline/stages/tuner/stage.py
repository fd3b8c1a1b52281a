"""The Tuner stage's declaration: the module's ``tuner_fn`` (or a config search space) over
Beam workers.

Its settings are :mod:`beam_pipeline.stages.tuner.settings`; the work its hooks delegate to
(the early-started worker pool, the progress of the trials, the search) is
:mod:`beam_pipeline.stages.tuner.executor`, imported when a hook runs.

Example::

    python -m beam_pipeline --data=train.csv --module_file=m.py --tuner_parallel_trials=2
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.engine.artifacts import Hyperparameters, Schema
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.engine.stage import Input, Preflight, Stage, StageContext
from beam_pipeline.stages.common.model_job import MODEL_INPUTS
from beam_pipeline.stages.tuner.settings import TunerConfig

if TYPE_CHECKING:
    from beam_pipeline.engine.history_entry import HistoryEntry
    from beam_pipeline.engine.report_sections import ReportSection, ReportView
    from beam_pipeline.engine.summary import StageReport
    from beam_pipeline.runtime.pool import LocalWorkerPool

__all__ = ["TunerConfig", "TunerStage"]


class TunerStage(Stage):
    """TransformGraph + TransformedExamples (+ Schema) -> Hyperparameters."""

    name = "Tuner"
    description = (
        "the module's `tuner_fn`: a Keras Tuner search, trials on Beam workers: one job per "
        "search, trial or round"
    )
    Config = TunerConfig
    config_key = "tuner"
    in_run_identity = True
    worker_modules = ("transforms.tuner",)
    forks = True
    inputs = (*MODEL_INPUTS, Input(Schema, key=None))
    outputs = (Hyperparameters,)
    # Its trials run the Trainer's module as the Trainer will.
    reads = ("trainer.entry_point", "trainer.custom_config", "trainer.mixed_precision")
    publishes_itself = True

    def configure(self, config: PipelineConfig, options: Any) -> PipelineConfig:
        from beam_pipeline.stages.tuner.schedule import with_schedule

        # The runner's schedule when none was given: recorded in the run's identity.
        return with_schedule(config, options)

    def preflight(self, run: Preflight) -> None:
        from beam_pipeline.stages.tuner import executor

        executor.preflight(run)

    def start(self, ctx: StageContext) -> Optional[LocalWorkerPool]:
        """The trials' worker pool, started now: its processes import TensorFlow while the
        data stages run, instead of after them (closed by :meth:`run` after the search)."""
        from beam_pipeline.stages.tuner import executor

        return executor.start(ctx)

    def progress(self, run_dir: str) -> str:
        """'trials: 3 done, 2 running, 0 failed; best 0.97' from keras-tuner's trial files."""
        from beam_pipeline.stages.tuner import executor

        return executor.progress(run_dir)

    def parameters(self, ctx: StageContext) -> dict:
        # The Trainer's settings its trials run with (reads): another entry point,
        # --custom_config or precision is another search, not a cached one. From the run's
        # identity, where --custom_config's secret-looking values are masked as they are
        # recorded (the store, manifest.json), as the Trainer keys its own.
        trainer = ctx.identity["trainer"]
        return {
            "module_file": ctx.module_digest,
            "tuner": ctx.identity["tuner"],
            "trainer": [trainer[read.split(".", 1)[1]] for read in self.reads],
        }

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """The trials, the objective per trial, per hyperparameter and per epoch."""
        from beam_pipeline.stages.tuner.report import trials_section

        return [trials_section(view)]

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        from beam_pipeline.engine.history_entry import HistoryEntry
        from beam_pipeline.engine.summary import StageStatus

        # The best trial's hyperparameters, compared by runs diff.
        ok = reports and reports[0].status in (StageStatus.OK, StageStatus.CACHED)
        details = reports[0].details if ok else {}
        best = dict(details.get("best_hyperparameters") or {})
        lines = []
        if details.get("trials"):  # the trials' outcomes, for runs show
            stopped = details.get("stopped_trials") or {}
            lines.append(
                f"Tuner: {details['trials']} trials: {details.get('completed', 0)} completed, "
                + (
                    f"{len(stopped)} stopped early ("
                    + ", ".join(f"trial {t} at epoch {s['epochs']}" for t, s in stopped.items())
                    + "), "
                    if stopped
                    else ""
                )
                + f"{details.get('failed', 0)} failed; best trial {details.get('best_trial')}"
            )
        return HistoryEntry(compared={"hyperparameters": best}, lines=lines)
