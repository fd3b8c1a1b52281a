"""The Trainer stage's work: the hooks' bodies that train, resolve and watch the model.

The training itself is :func:`beam_pipeline.stages.trainer.training.run_training_stage`,
which writes ``model_run/`` in place (a retry resumes from its checkpoints) and publishes
``model/`` and ``model_run/`` itself; :func:`run` gives it Transform's outputs, the schema
and the tuner's best hyperparameters (when the tuner ran), and reports the model.

Example::

    uri = check_warm_start(store, config, run_id)  # --warm_start's model, before the run
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Mapping
from typing import Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.artifacts import Hyperparameters, Model, ModelRun, TypedArtifact
from beam_pipeline.engine.stage import Outputs, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageStatus
from beam_pipeline.stages.common.model_job import model_inputs

__all__ = ["check_warm_start", "progress", "resolved_inputs", "run"]


def progress(run_dir: str) -> str:
    """The stage's progress hook: 'epoch 4, loss 0.31' from the newest TensorBoard event
    file in model_run/train."""
    files = glob.glob(os.path.join(run_dir, "model_run", "train", "events.out.tfevents.*"))
    if not files:
        return ""
    import tensorflow as tf

    step, loss = None, None
    try:
        for event in tf.compat.v1.train.summary_iterator(max(files, key=os.path.getmtime)):
            for value in event.summary.value:
                if value.tag.endswith("loss") and value.HasField("tensor"):
                    step, loss = event.step, float(tf.make_ndarray(value.tensor))
    except (tf.errors.OpError, OSError, ValueError):  # a record half written: next poll
        pass
    if step is None:
        return ""
    return f"epoch {step + 1}, loss {loss:.4g}"


def resolved_inputs(ctx: StageContext) -> tuple[TypedArtifact, ...]:
    """The stage's ``resolved_inputs`` hook: ``--warm_start``'s model, from the metadata
    store."""
    which = ctx.config.trainer.warm_start
    if not which:
        return ()
    from beam_pipeline.stages.common.metadata_store import open_store

    with open_store(ctx) as store:
        uri = check_warm_start(store, ctx.config, ctx.run_dir.run_id)
    return (Model(uri, {"warm_start": which}),)


def run(
    stage: Stage,
    ctx: StageContext,
    inputs: Mapping[type[TypedArtifact], TypedArtifact],
    out: Outputs,
) -> StageResult:
    """The stage's ``run`` hook: the training job (with the tuner's best hyperparameters
    and the ``--warm_start`` model when there are), reported with the model."""
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
        start = config.trainer.base_model
        if start:  # the summary says what it trained from, not only `runs lineage`
            by = f"--warm_start={base.properties['warm_start']}" if base else "--base_model"
            report.note = f"{report.note}; warm-started from {start} ({by})"
            report.details["warm_start"] = {"model": start, "by": by}
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
    uri, gone = _warm_start_model(store, which, run_id)
    if uri is None and gone is not None:
        raise PipelineError(
            f"--warm_start {which}: the {which.replace('_', ' ')} model recorded for this "
            f"pipeline in the metadata store, {gone}, is gone from disk (so is every "
            "earlier one); put that folder back, or pass --base_model PATH."
        )
    if uri is None:
        raise PipelineError(
            f"--warm_start {which} found no {which.replace('_', ' ')} model of this "
            f"pipeline in the metadata store of {config.pipeline_root}; run once "
            "without --warm_start first, or pass --base_model PATH."
        )
    return uri


def _warm_start_model(store, which: str, run_id: str) -> tuple[Optional[str], Optional[str]]:
    """The uri of this pipeline's latest blessed (or latest) model still on disk, made by
    another run (None if there is none), and where none is, the uri of the newest one
    recorded whose folder is gone (None if none is recorded)."""
    from beam_pipeline.metadata import ArtifactState
    from beam_pipeline.metadata.store import is_available

    if which == "latest_blessed":
        found = store.latest_blessed_model()
        if found is not None:
            return found.uri, None
        recorded = store.latest_blessed_model(on_disk=False)
        return None, recorded.uri if recorded is not None else None
    gone = None
    for run in store.list_runs():  # newest first
        if run.run_id == run_id:
            continue
        for execution in store.run_executions(run.run_id) or ():
            for artifact in execution.outputs.values():
                if artifact.type_name != Model.__name__:
                    continue
                if is_available(artifact):
                    return artifact.uri, None
                if gone is None and artifact.state is ArtifactState.PUBLISHED:
                    gone = artifact.uri
    return None, gone
