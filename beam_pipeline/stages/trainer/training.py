"""The Trainer stage: checks the module, runs the training step as Beam work, publishes.

The module file is loaded and checked first (before any Beam work); the training job is
built from the run directory's artifacts and the trainer configuration, and runs as one
element through :class:`transforms.trainer.TrainModel` (with the accelerator / min_ram
resource hints), so it trains on a Beam worker, not on the launching machine.

Resume and publication (a run directory's ``model_run/`` is written in place):

- ``<run_dir>/model_run/`` is the trainer's working folder, the same path in every attempt
  of a run: checkpoints (``checkpoints/`` for a TrainSpec, ``backup/`` for the bundled
  ``run_fn``), TensorBoard logs, and last ``training_result.json``, the completion marker.
  A killed attempt leaves its checkpoints there, and a retry (Beam's, or a rerun of the same
  ``--run_id``) resumes from them.
- The serving model is exported to ``<run_dir>/model_run/export/`` (also stable), then
  moved to ``<run_dir>/model/`` by :meth:`RunDirectory.publish`; ``model_run/`` is marked
  published (``_PUBLISHED`` written last) after that.
- A rerun finds the stage published and reports CACHED; a rerun after a finished training
  whose publication was cut off publishes without training again.

Example::

    report = run_training_stage(config, run_dir, options)
    print(report.note)   # validation loss=0.06 sparse_categorical_accuracy=0.98 ...
"""

from __future__ import annotations

import time
import uuid
from typing import Optional

import apache_beam as beam
from apache_beam.options import pipeline_options as po
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.module_staging import StagedModule
from beam_pipeline.core.types import PUBLISHED_MARKER, Artifact
from beam_pipeline.engine.artifacts import ModelInputs
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.engine.run_dir import RunDirectory
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.runtime.counters import job_counters
from beam_pipeline.runtime.options import create_pipeline, run_pipeline
from beam_pipeline.runtime.runners import RunnerFamily, runner_family, worker_per_element
from beam_pipeline.stages.common.model_job import model_job_fields
from trainer import (
    ModuleKind,
    TrainingJob,
    TrainingResult,
    check_base_model,
    check_trainer_module,
    load_hyperparameters,
    read_result,
)
from trainer.module_loader import check_no_misspelled_run_fn
from trainer.multiworker import RENDEZVOUS_SUBDIR
from transforms.trainer import TrainModel

__all__ = [
    "STAGE",
    "EXPORT_SUBDIR",
    "build_training_job",
    "dry_run",
    "run_training_stage",
    "training_pipeline",
]

STAGE = "Trainer"
EXPORT_SUBDIR = "export"


def build_training_job(
    config: PipelineConfig,
    run_dir: RunDirectory,
    hyperparameters_path: Optional[str] = None,
    *,
    entry_point: Optional[str] = None,
    staged: Optional[StagedModule] = None,
    inputs: Optional[ModelInputs] = None,
) -> TrainingJob:
    """The training job for a run, with every input checked on the launching machine.

    Args:
      config: the run's configuration (module file, ``config.trainer``).
      run_dir: the run directory holding the data stages' artifacts.
      hyperparameters_path: the tuner's best hyperparameters JSON; when given it is used
        instead of ``config.trainer.hyperparameters``.
      entry_point: the run_fn-like function or TrainSpec class to train with.
      staged: the module file and its folder as staged in the run directory, which the
        worker loads (None: the worker loads ``config.module_file`` itself).
      inputs: the Transform stage's outputs and the schema (default: those published in
        ``run_dir``).

    Raises:
      PipelineError: a missing artifact, a bad hyperparameters / custom_config / base_model
        value, or non-positive step counts.
    """
    trainer_config = config.trainer  # its ranges: checked by TrainerConfig
    fields = model_job_fields(
        run_dir,
        "trainer",
        config.module_file or "",
        custom_config=trainer_config.custom_config,
        mixed_precision=trainer_config.mixed_precision,
        entry_point=entry_point,
        staged=staged,
        inputs=inputs,
    )
    base_model = trainer_config.base_model
    if base_model:
        check_base_model(base_model)
    hp_path = hyperparameters_path or trainer_config.hyperparameters
    return TrainingJob(
        **fields,
        serving_model_dir=run_dir.path(Artifact.MODEL_RUN, EXPORT_SUBDIR),
        model_run_dir=run_dir.path(Artifact.MODEL_RUN),
        train_steps=trainer_config.train_steps,
        eval_steps=trainer_config.eval_steps,
        hyperparameters=load_hyperparameters(hp_path) if hp_path else None,
        base_model=base_model,
    )


def training_pipeline(
    job: TrainingJob, config: PipelineConfig, options: PipelineOptions, outcome: str
) -> beam.Pipeline:
    """The Trainer's job (not run): the training step, its result written to ``outcome``.

    With ``--train_workers`` N > 1 on Dataflow, the step has one element per rank, each
    on a VM of its own with the trainer's hints (N workers, no autoscaling, as the tuner's
    search job); other runners would run one bundle's elements one after the other, so
    there one element starts every rank in a process of its own.
    """
    settings = config.trainer
    per_element = settings.workers > 1 and runner_family(options) is RunnerFamily.DATAFLOW
    train = TrainModel(
        job,
        accelerator=settings.accelerator,
        min_ram=settings.min_ram,
        timeout=settings.timeout,
        workers=settings.workers,
        per_element=per_element,
        retries=settings.worker_retries,
        rendezvous_timeout=settings.rendezvous_timeout,
    )
    if per_element:
        options = worker_per_element(options, settings.workers)
    p = create_pipeline(options)
    _ = (
        p
        | "TrainModel" >> train
        | "ToJson" >> beam.Map(TrainingResult.to_json)
        | "WriteResult" >> beam.io.WriteToText(outcome, shard_name_template="", num_shards=1)
    )
    return p


def _run_pipeline(
    job: TrainingJob, config: PipelineConfig, run_dir: RunDirectory, options: PipelineOptions
) -> tuple[Optional[TrainingResult], dict[str, int]]:
    """Runs the training step; returns its result (None on a dry run) and its counters."""
    outcome_dir = run_dir.path(Artifact.MODEL_RUN, f".outcome-{uuid.uuid4().hex[:8]}")
    outcome = outcome_dir + "/result.json"
    rendezvous = fileio.join(job.model_run_dir, RENDEZVOUS_SUBDIR)
    if config.trainer.workers > 1 and fileio.exists(rendezvous) and not dry_run(options):
        # An earlier run of this stage is over (no element of this job has started): its
        # attempts with it, and the ranks meet at attempt 0 again.
        fileio.rmtree(rendezvous)
    p = training_pipeline(job, config, options, outcome)
    beam_result = run_pipeline(p, "Trainer", config.worker_start_timeout)
    beam_result.wait_until_finish()
    counters = job_counters(beam_result)
    if not fileio.exists(outcome):
        return None, counters
    with fileio.open(outcome) as f:
        result = TrainingResult.from_json(f.read().strip())
    fileio.rmtree(outcome_dir)
    return result, counters


def dry_run(options: PipelineOptions) -> bool:
    """Whether ``options`` only build the job (``--dry_run``)."""
    return bool(options.view_as(po.TestOptions).dry_run)


def _publish(run_dir: RunDirectory, result: TrainingResult) -> str:
    """Moves the export to ``model/`` and marks ``model_run/`` published (marker last)."""
    if not run_dir.is_published(Artifact.MODEL):
        run_dir.publish(Artifact.MODEL, result.serving_model_dir)
    with fileio.open(run_dir.path(Artifact.MODEL_RUN, PUBLISHED_MARKER), "w") as f:
        f.write(time.strftime("%Y-%m-%dT%H:%M:%S"))
    return run_dir.path(Artifact.MODEL)


def _report(
    status: StageStatus, result: TrainingResult, model: str, seconds: float, counters: dict
) -> StageReport:
    metrics = " ".join(f"{k}={v:.4g}" for k, v in sorted(result.metrics.items()))
    steps = f" after {result.final_step} steps" if result.final_step is not None else ""
    resumed = ""
    if result.start_step:
        resumed = f", resumed at step {result.start_step}"
    elif result.start_epoch:
        resumed = f", resumed after epoch {result.start_epoch}"
    if resumed and result.resumed_from:
        resumed += f" from {result.resumed_from}"
    workers = f" over {result.workers} workers" if result.workers > 1 else ""
    note = (
        # "validation": Keras's, on --eval_steps batches, not the Evaluator's evaluation of
        # the whole eval split.
        f"validation {metrics or '(no metrics logged)'}{steps}{resumed} on {result.num_replicas} "
        f"replica(s){workers} ({result.strategy}); model: {model}"
    )
    return StageReport(
        stage=STAGE,
        status=status,
        seconds=round(seconds, 3),
        artifact=model,
        note=note,
        details={
            "metrics": dict(result.metrics),
            "num_replicas": result.num_replicas,
            "devices": list(result.devices),
            "strategy": result.strategy,
            "workers": result.workers,
            "module_kind": result.module_kind,
            "start_step": result.start_step,
            "start_epoch": result.start_epoch,
            "resumed_from": result.resumed_from,
            "final_step": result.final_step,
            "reused": result.reused,
            "worker": result.worker,
            "counters": counters,
        },
    )


def check_trainer_entry(config: PipelineConfig, loaded) -> None:
    """Refuses, before the run starts, a module the Trainer cannot train as asked: a
    misspelled ``run_fn`` (it would train nothing). ``loaded``: the launcher's
    :class:`trainer.TrainerModule`.

    Raises:
      PipelineError: one sentence naming the module and the fix.
    """
    check_no_misspelled_run_fn(loaded)


def run_training_stage(
    config: PipelineConfig,
    run_dir: RunDirectory,
    options: PipelineOptions,
    hyperparameters_path: Optional[str] = None,
    *,
    entry_point: Optional[str] = None,
    staged: Optional[StagedModule] = None,
    inputs: Optional[ModelInputs] = None,
) -> StageReport:
    """Trains the module's model as a Beam step and publishes ``model/`` and ``model_run/``.

    Args:
      config: the run's configuration.
      run_dir: the run directory with the data stages' artifacts.
      options: Beam pipeline options (the runner the training step runs on).
      hyperparameters_path: the tuner's best_hyperparameters.json, when the tuner ran.
      entry_point: the run_fn-like function or TrainSpec class to use (default: run_fn,
        else the module's only TrainSpec subclass).
      staged: the module file and its folder as staged in the run directory (see
        :func:`beam_pipeline.core.module_staging.stage_module_file`), which the worker loads.
      inputs: the Transform stage's outputs and the schema (default: those published in
        ``run_dir``).

    Returns:
      a StageReport: OK (trained), CACHED (already published in this run directory) or
      SKIPPED (training disabled, no module, or a module with nothing to train; dry run).

    Raises:
      PipelineError: a bad module file, input, flag value, or a failure in the module's
        training code or export.
    """
    start = time.time()
    if not config.trainer.enabled:
        return StageReport(STAGE, StageStatus.SKIPPED, note="training is disabled (--no_trainer)")
    if not config.module_file:
        return StageReport(STAGE, StageStatus.SKIPPED, note="no module file, nothing to train")
    kind = check_trainer_module(config.module_file, entry_point=entry_point, staged=staged)
    if kind is ModuleKind.NONE:
        return StageReport(
            STAGE,
            StageStatus.SKIPPED,
            note=(
                f"{config.module_file} defines no run_fn or TrainSpec subclass: the data "
                "stages and Transform ran; nothing was tuned, trained, evaluated or pushed"
            ),
        )
    model_run = run_dir.path(Artifact.MODEL_RUN)
    if run_dir.is_published(Artifact.MODEL) and run_dir.is_published(Artifact.MODEL_RUN):
        result = read_result(model_run)
        if result is not None:
            return _report(
                StageStatus.CACHED, result, run_dir.path(Artifact.MODEL), time.time() - start, {}
            )
    finished = read_result(model_run)
    if finished is not None and run_dir.is_published(Artifact.MODEL):
        # Trained and moved into place, but cut off before model_run/ was marked.
        model = _publish(run_dir, finished)
        return _report(StageStatus.OK, finished, model, time.time() - start, {})

    job = build_training_job(
        config, run_dir, hyperparameters_path, entry_point=entry_point, staged=staged, inputs=inputs
    )
    result, counters = _run_pipeline(job, config, run_dir, options)
    if result is None:
        dry = options.view_as(po.TestOptions).dry_run
        if dry:
            return StageReport(STAGE, StageStatus.SKIPPED, note="dry run: job graph built only")
        raise PipelineError(
            f"The training step wrote no result under {model_run}; check the runner's logs "
            "for the worker that ran it and rerun with the same --run_id to resume."
        )
    if result.error:
        raise PipelineError(result.error)
    model = _publish(run_dir, result)
    return _report(StageStatus.OK, result, model, time.time() - start, counters)
