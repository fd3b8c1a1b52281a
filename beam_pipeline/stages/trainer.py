"""The Trainer stage: the module's ``run_fn`` or TrainSpec trained as a Beam step.

The training itself is :func:`beam_pipeline.training_stage.run_training_stage`, which
writes ``model_run/`` in place (a retry resumes from its checkpoints) and publishes
``model/`` and ``model_run/`` itself; this unit gives it Transform's outputs, the schema
and the tuner's best hyperparameters (when the tuner ran), and reports the model.
"""

from __future__ import annotations

from collections.abc import Mapping

from beam_pipeline.artifacts import Hyperparameters, Model, ModelRun, Schema, TypedArtifact
from beam_pipeline.stages.base import Input, Outputs, Stage, StageContext, StageName, StageResult
from beam_pipeline.stages.tuner import MODEL_INPUTS, model_inputs
from beam_pipeline.summary import StageStatus
from beam_pipeline.training_stage import run_training_stage

__all__ = ["TrainerStage"]


class TrainerStage(Stage):
    """TransformGraph + TransformedExamples + Schema (+ Hyperparameters) -> Model + ModelRun."""

    name = StageName.TRAINER
    inputs = (
        *MODEL_INPUTS,
        Input(Schema, key="schema"),
        Input(Hyperparameters, key="tuner", optional=True),
    )
    outputs = (Model, ModelRun)
    publishes_itself = True
    keeps_outputs_on_rerun = True  # model_run/: the checkpoints a rerun resumes from

    def parameters(self, ctx: StageContext) -> dict:
        return {"module_file": ctx.module_digest, "trainer": ctx.identity["trainer"]}

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        best = inputs.get(Hyperparameters)
        report = run_training_stage(
            ctx.config,
            ctx.run_dir,
            ctx.options,
            best.file if best is not None else None,
            entry_point=ctx.config.trainer.entry_point,
            staged=ctx.staged,
            inputs=model_inputs(inputs),
        )
        outputs = ()
        if report.status in (StageStatus.OK, StageStatus.CACHED):
            outputs = (out.artifact(Model), out.artifact(ModelRun))
        return StageResult([report], outputs=outputs)
