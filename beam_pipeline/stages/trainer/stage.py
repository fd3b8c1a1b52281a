"""The Trainer stage: the module's ``run_fn`` or TrainSpec trained as a Beam step.

The training itself is :func:`beam_pipeline.stages.trainer.training.run_training_stage`, which
writes ``model_run/`` in place (a retry resumes from its checkpoints) and publishes
``model/`` and ``model_run/`` itself; this unit gives it Transform's outputs, the schema
and the tuner's best hyperparameters (when the tuner ran), and reports the model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.artifacts import Hyperparameters, Model, ModelRun, Schema, TypedArtifact
from beam_pipeline.engine.stage import Input, Outputs, Stage, StageContext, StageName, StageResult
from beam_pipeline.engine.summary import StageStatus
from beam_pipeline.stages.common.model_job import MODEL_INPUTS, model_inputs

__all__ = ["TrainerStage", "check_warm_start"]


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

    def resolved_inputs(self, ctx: StageContext) -> tuple[TypedArtifact, ...]:
        """``--warm_start``'s model, from the metadata store."""
        which = ctx.config.trainer.warm_start
        if not which or not ctx.config.trainer.enabled:
            return ()
        from beam_pipeline.stages.common.store import open_store

        with open_store(ctx) as store:
            uri = check_warm_start(store, ctx.config, ctx.run_dir.run_id)
        return (Model(uri, {"warm_start": which}),)

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        from beam_pipeline.stages.trainer.training import run_training_stage

        best = inputs.get(Hyperparameters)
        config = ctx.config
        base = inputs.get(Model)
        if base is not None:  # --warm_start: the model the store resolved
            config = dataclasses.replace(
                config,
                trainer=dataclasses.replace(config.trainer, base_model=base.uri, warm_start=None),
            )
        report = run_training_stage(
            config,
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


def check_warm_start(store, config, run_id: str = "") -> str:
    """``--warm_start``'s model (its uri), checked before anything of the run is written.

    Args:
      store: the run's metadata store, or None (a remote root without ``--metadata_url``).
      config: the run's configuration.
      run_id: this run's id (its own model is not a base model).

    Raises:
      PipelineError: there is no store, or no such model in it.
    """
    which = config.trainer.warm_start
    if store is None:
        raise PipelineError(
            f"--warm_start {which} looks the model up in the metadata store, and this run has "
            "none (a remote --pipeline_root); pass --metadata_url or --base_model PATH."
        )
    uri = _warm_start_model(store, which, run_id)
    if uri is None:
        raise PipelineError(
            f"--warm_start {which} found no {which.replace('_', ' ')} model of this "
            f"pipeline in the metadata store of {config.pipeline_root}; run once "
            "without --warm_start first, or pass --base_model PATH."
        )
    return uri


def _warm_start_model(store, which: str, run_id: str) -> Optional[str]:
    """The uri of this pipeline's latest blessed (or latest) model still on disk, made by
    another run; None if there is none."""
    from beam_pipeline.metadata.store import is_available

    if which == "latest_blessed":
        found = store.latest_blessed_model()
        return found.uri if found is not None else None
    for run in store.list_runs():  # newest first
        if run.run_id == run_id:
            continue
        for execution in store.run_executions(run.run_id) or ():
            for artifact in execution.outputs.values():
                if artifact.type_name == Model.__name__ and is_available(artifact):
                    return artifact.uri
    return None
