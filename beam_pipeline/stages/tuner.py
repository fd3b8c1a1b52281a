"""The Tuner stage: the module's ``tuner_fn`` (or a config search space) over Beam workers.

The search itself is :func:`beam_pipeline.tuning_stage.run_tuning_stage`, which stages and
publishes ``tuner/`` itself; this unit gives it Transform's outputs and the schema, and
reports the best hyperparameters as the stage's output (none when the stage was skipped).

Example::

    pool = default_tuner_pool(config, options)   # started while the data stages run
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Optional

from beam_pipeline.artifacts import (
    Hyperparameters,
    ModelInputs,
    Schema,
    TransformedExamples,
    TransformGraph,
    TypedArtifact,
)
from beam_pipeline.beam_options import is_direct
from beam_pipeline.config import PipelineConfig
from beam_pipeline.core.fileio import is_remote
from beam_pipeline.run_dir import RunDirectory
from beam_pipeline.runtime.pool import LocalWorkerPool
from beam_pipeline.stages.base import Input, Outputs, Stage, StageContext, StageName, StageResult
from beam_pipeline.tuning_stage import BEST_HYPERPARAMETERS_FILE, run_tuning_stage

__all__ = ["TunerStage", "default_tuner_pool"]

# The model stages read Transform's two outputs (one producing stage, so one key) and the
# schema, whose key the transform graph's already holds.
MODEL_INPUTS = (
    Input(TransformGraph, key="transform"),
    Input(TransformedExamples, key="transform"),
)


def model_inputs(inputs: Mapping[type[TypedArtifact], TypedArtifact]) -> ModelInputs:
    """The model stages' inputs as the jobs' :class:`ModelInputs`."""
    return ModelInputs(inputs[TransformGraph], inputs[TransformedExamples], inputs.get(Schema))


def default_tuner_pool(
    config: PipelineConfig, options, run_dir: Optional[RunDirectory] = None
) -> Optional[LocalWorkerPool]:
    """Worker processes for the trials when the user left the DirectRunner's mode unset.

    Trials are heavy elements: by default they run ``--tuner_parallel_trials`` at a time
    (at most one per core) in worker processes, although the data stages run in_memory. A
    ``--direct_running_mode`` the user gives decides instead (see ``run_tuning_stage``).
    """
    if (
        not config.tuner.enabled
        or not is_direct(options)
        or config.tuner.parallel_trials < 2
        or any(a.startswith("--direct_running_mode") for a in config.beam_args)
    ):
        return None
    cores = os.cpu_count() or 1
    workers = max(1, min(config.tuner.parallel_trials, cores))
    log_parent = run_dir.root if run_dir is not None and not is_remote(run_dir.root) else None
    return LocalWorkerPool(
        workers, threads_per_worker=max(1, cores // workers), log_parent=log_parent
    )


class TunerStage(Stage):
    """TransformGraph + TransformedExamples (+ Schema) -> Hyperparameters."""

    name = StageName.TUNER
    inputs = (*MODEL_INPUTS, Input(Schema, key=None))
    outputs = (Hyperparameters,)
    publishes_itself = True

    def parameters(self, ctx: StageContext) -> dict:
        return {"module_file": ctx.module_digest, "tuner": ctx.identity["tuner"]}

    def run(
        self, ctx: StageContext, inputs: Mapping[type[TypedArtifact], TypedArtifact], out: Outputs
    ) -> StageResult:
        # The early-started pool (if any) serves this search and is stopped after it.
        with ctx.tuner_pool:
            report, best = run_tuning_stage(
                ctx.config,
                ctx.run_dir,
                ctx.options,
                worker_pool=ctx.pool,
                search_space=ctx.config.tuner.search_space,
                staged=ctx.staged,
                inputs=model_inputs(inputs),
            )
        outputs = ()
        if best is not None:
            outputs = (out.artifact(Hyperparameters, file=BEST_HYPERPARAMETERS_FILE),)
        return StageResult([report], outputs=outputs)
