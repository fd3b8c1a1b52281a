"""The Trainer stage's declaration: the module's ``run_fn`` or TrainSpec trained as a Beam step.

Its settings (TFX's TrainArgs/EvalArgs and more), its inputs (Transform's outputs, the
schema, the tuner's best hyperparameters) and its hooks; the work they delegate to is
:mod:`beam_pipeline.stages.trainer.executor` (and its Beam job,
:mod:`beam_pipeline.stages.trainer.training`), imported when a hook runs.

Example::

    python -m beam_pipeline --data=train.csv --module_file=m.py --train_steps=200
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import setting
from beam_pipeline.engine.artifacts import Hyperparameters, Model, ModelRun, Schema, TypedArtifact
from beam_pipeline.engine.config import check_int, check_seconds
from beam_pipeline.engine.stage import Input, Preflight, Stage, StageContext, switch
from beam_pipeline.stages.common.model_job import MODEL_INPUTS

if TYPE_CHECKING:
    from beam_pipeline.engine.history_entry import HistoryEntry
    from beam_pipeline.engine.report_sections import ReportSection, ReportView
    from beam_pipeline.engine.summary import StageReport

__all__ = ["TrainerConfig", "TrainerStage"]


def _custom_config(value: Any) -> str:
    from beam_pipeline.stages.common.model_job import parse_custom_config

    text = value if isinstance(value, str) else json.dumps(value)
    parse_custom_config(text)  # checked here, parsed again where fn_args is built
    return text


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Settings of the training stage (TFX's TrainArgs/EvalArgs and more).

    ``mixed_precision``: the model computes in float16 on GPUs, bfloat16 on CPUs (a
    TrainSpec's in training and tuning; a ``run_fn``'s under Keras's global policy, named in
    ``fn_args.mixed_precision``; see :mod:`trainer.precision`). ``timeout`` is not part of
    the run's identity: how long one may wait changes no result.
    """

    enabled: bool = switch(
        "Do not train (nor evaluate or push): the data stages, Transform and tuning run."
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
        help="JSON object reaching fn_args.custom_config (recorded with the values of keys "
        "naming a key, secret, token, password or credential masked).",
        parse=_custom_config,
        takes=(dict,),
        secret_keys=True,
    )
    entry_point: Optional[str] = setting(
        None,
        flag="trainer_entry_point",
        help="run_fn-like function or TrainSpec class of the module to train with.",
    )
    mixed_precision: bool = setting(
        False,
        flag="mixed_precision",
        help="Train in float16 on GPUs, bfloat16 on CPUs (a TrainSpec or run_fn model).",
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
    workers: int = setting(
        1,
        flag="train_workers",
        help=(
            "Workers that train the module together (MultiWorkerMirroredStrategy; a run_fn "
            "builds its model with tf_keras); 1: one."
        ),
        kind="int",
    )
    worker_retries: int = setting(
        2,
        flag="train_worker_retries",
        help="Attempts after the first when a training worker is lost (--train_workers > 1).",
        kind="int",
        identity=False,
    )
    rendezvous_timeout: float = setting(
        300.0,
        flag="train_rendezvous_timeout",
        help="Seconds a training worker waits for the others (--train_workers > 1).",
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
        check_int("train_workers", self.workers, 1)
        check_int("train_worker_retries", self.worker_retries, 0)
        check_seconds("train_rendezvous_timeout", self.rendezvous_timeout, "300")
        if self.timeout is not None:
            check_seconds("trainer_timeout", self.timeout, "3600", unlimited=True)


class TrainerStage(Stage):
    """TransformGraph + TransformedExamples + Schema (+ Hyperparameters) -> Model + ModelRun."""

    name = "Trainer"
    description = (
        "the module's `run_fn` (or a `TrainSpec`) under the worker's distribution strategy: "
        "its own Beam job (GPU resource hints)"
    )
    Config = TrainerConfig
    config_key = "trainer"
    in_run_identity = True
    worker_modules = ("transforms.trainer",)
    forks = True
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
        if run.user_module is not None:  # what it trains with: refused before anything runs
            from beam_pipeline.stages.trainer.training import check_trainer_entry

            check_trainer_entry(config, run.user_module)
        if config.trainer.warm_start:
            from beam_pipeline.stages.trainer import executor

            executor.check_warm_start(run.store(), config, config.run_id)

    def progress(self, run_dir: str) -> str:
        """'epoch 4, loss 0.31' from the newest TensorBoard event file in model_run/train."""
        from beam_pipeline.stages.trainer import executor

        return executor.progress(run_dir)

    def parameters(self, ctx: StageContext) -> dict:
        return {"module_file": ctx.module_digest, "trainer": ctx.identity["trainer"]}

    def resolved_inputs(self, ctx: StageContext) -> tuple[TypedArtifact, ...]:
        """``--warm_start``'s model, from the metadata store."""
        from beam_pipeline.stages.trainer import executor

        return executor.resolved_inputs(ctx)

    def report_sections(self, view: ReportView) -> list[ReportSection]:
        """The training result and the curves Keras logged to TensorBoard."""
        from beam_pipeline.stages.trainer.report import training_section

        return [training_section(view)]

    history_columns = {"metrics": {}}  # its eval metrics (history())

    def history(self, reports: Sequence[StageReport]) -> HistoryEntry:
        from beam_pipeline.engine.history_entry import HistoryEntry
        from beam_pipeline.engine.summary import StageStatus

        # Its eval metrics: runs list's "metrics" column, compared by runs diff.
        ok = reports and reports[0].status in (StageStatus.OK, StageStatus.CACHED)
        metrics = dict(reports[0].details.get("metrics") or {}) if ok else {}
        return HistoryEntry(columns={"metrics": metrics}, compared={"metrics": metrics})
