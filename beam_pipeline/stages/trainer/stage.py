"""The Trainer stage: the module's ``run_fn`` or TrainSpec trained as a Beam step.

The training itself is :func:`beam_pipeline.stages.trainer.training.run_training_stage`, which
writes ``model_run/`` in place (a retry resumes from its checkpoints) and publishes
``model/`` and ``model_run/`` itself; this unit gives it Transform's outputs, the schema
and the tuner's best hyperparameters (when the tuner ran), and reports the model.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.engine.artifacts import Hyperparameters, Model, ModelRun, Schema, TypedArtifact
from beam_pipeline.engine.config import check_int, check_seconds
from beam_pipeline.engine.history_entry import HistoryEntry
from beam_pipeline.engine.report_sections import ReportSection, ReportView
from beam_pipeline.engine.stage import Input, Outputs, Preflight, Stage, StageContext, StageResult
from beam_pipeline.engine.summary import StageReport, StageStatus
from beam_pipeline.stages.common.model_job import MODEL_INPUTS, model_inputs, parse_custom_config

__all__ = ["TrainerConfig", "TrainerStage", "check_warm_start"]


def _custom_config(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    parse_custom_config(text)  # checked here, parsed again where fn_args is built
    return text


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Settings of the training stage (TFX's TrainArgs/EvalArgs and more).

    ``mixed_precision``: a TrainSpec's model computes in float16 on GPUs, bfloat16 on CPUs
    (training and tuning); a ``run_fn`` gets the policy's name in ``fn_args.mixed_precision``
    (see :mod:`trainer.precision`). ``timeout`` is not part of the run's identity: how long
    one may wait changes no result.
    """

    enabled: bool = setting(
        True,
        flag="trainer",
        help="Do not train (nor evaluate or push): the data stages, Transform and tuning run.",
        kind="switch",
    )
    train_steps: int = setting(
        100, flag="train_steps", help="Steps the Trainer trains (fn_args.train_steps).", kind="int"
    )
    eval_steps: int = setting(
        5, flag="eval_steps", help="Steps the Trainer evaluates (fn_args.eval_steps).", kind="int"
    )
    hyperparameters: Optional[str] = setting(
        None,
        flag="hyperparameters",
        help="Keras Tuner HyperParameters config JSON file.",
        path=True,
        digest="file",
    )
    base_model: Optional[str] = setting(
        None,
        flag="base_model",
        help="SavedModel folder to warm-start from.",
        path=True,
        worker_path=True,
        digest="folder",
    )
    accelerator: Optional[str] = setting(
        None,
        flag="trainer_accelerator",
        help="e.g. type:nvidia-l4;count:1;install-nvidia-driver",
    )
    min_ram: Optional[str] = setting(None, flag="trainer_min_ram", help="e.g. 16GB")
    custom_config: str = setting(
        "{}",
        flag="custom_config",
        help="JSON object reaching fn_args.custom_config.",
        parse=_custom_config,
    )
    entry_point: Optional[str] = setting(
        None,
        flag="trainer_entry_point",
        help="run_fn-like function or TrainSpec class of the module to train with.",
    )
    mixed_precision: bool = setting(
        False,
        flag="mixed_precision",
        help="Train in float16 on GPUs, bfloat16 on CPUs (TrainSpec; fn_args.mixed_precision).",
        kind="switch",
    )
    warm_start: Optional[str] = setting(
        None,
        flag="warm_start",
        help="Warm-start from this pipeline's latest blessed (or latest) model, found in the "
        "metadata store (fn_args.base_model).",
        kind="choice",
        choices=("latest_blessed", "latest"),
    )
    timeout: Optional[float] = setting(
        None,
        flag="trainer_timeout",
        help="Seconds run_fn may train before the run fails (default: no limit).",
        kind="float",
        identity=False,
    )

    def __post_init__(self):
        if self.warm_start not in (None, "latest_blessed", "latest"):
            raise PipelineError(
                f"--warm_start={self.warm_start!r} is not a choice; pass latest_blessed or "
                "latest (or --base_model PATH for a given SavedModel)."
            )
        if self.warm_start and self.base_model:
            raise PipelineError(
                "--warm_start and --base_model both name the model to start from; pass one."
            )
        if self.base_model:  # 0 steps: export the warm-started model as it is
            check_int("train_steps", self.train_steps, 0)
        else:
            check_int("train_steps", self.train_steps, 1, " (0 only with --base_model)")
        check_int("eval_steps", self.eval_steps, 1)
        if self.timeout is not None:
            check_seconds("trainer_timeout", self.timeout, "3600", unlimited=True)


class TrainerStage(Stage):
    """TransformGraph + TransformedExamples + Schema (+ Hyperparameters) -> Model + ModelRun."""

    name = "Trainer"
    Config = TrainerConfig
    config_key = "trainer"
    in_run_identity = True
    worker_modules = ("transforms.trainer",)
    inputs = (
        *MODEL_INPUTS,
        Input(Schema, key="schema"),
        Input(Hyperparameters, key="tuner", optional=True),
    )
    outputs = (Model, ModelRun)
    publishes_itself = True
    keeps_outputs_on_rerun = True  # model_run/: the checkpoints a rerun resumes from

    def preflight(self, run: Preflight) -> None:
        config = run.config
        if config.trainer.warm_start and config.trainer.enabled:
            check_warm_start(run.store(), config, config.run_id)

    def progress(self, run_dir: str) -> str:
        """'epoch 4, loss 0.31' from the newest TensorBoard event file in model_run/train."""
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

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """The training result and the curves Keras logged to TensorBoard."""
        from beam_pipeline.stages.trainer.report import training_section

        return [training_section(view)]

    history_columns = {"metrics": {}}  # its eval metrics (history())

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        # Its eval metrics: runs list's "metrics" column, compared by runs diff.
        ok = reports and reports[0].status in (StageStatus.OK, StageStatus.CACHED)
        metrics = dict(reports[0].details.get("metrics") or {}) if ok else {}
        return HistoryEntry(columns={"metrics": metrics}, compared={"metrics": metrics})


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
