"""``run_trainer``: one training job, run in a plain process (a Beam worker calls it).

It loads the module file, hands ``run_fn`` (or the TrainSpec runner) its ``FnArgs`` with
the worker's distribution strategy, checks that ``serving_model_dir`` then holds a loadable
SavedModel with ``serving_default``, and records the result as ``training_result.json`` in
``model_run_dir``. That file is the completion marker: a job whose marker and SavedModel
exist is not redone, and a job killed before it resumes from the checkpoints in
``model_run_dir`` (both folders must therefore be stable per run).

Example::

    job = TrainingJob(module_file="penguin_module.py", module_source=open(...).read(),
                      train_files=("run/transformed_examples/train/*",), ...)
    result = run_trainer(job)
    result.metrics, result.num_replicas
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any, Optional

import trainer.export as export
from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, first_line
from trainer.data_accessor import DataAccessor
from trainer.fn_args import FnArgs
from trainer.job import ModelJob, common_fn_args
from trainer.module_loader import ModuleKind, TrainerModule, error_place
from trainer.precision import policy_scope
from trainer.process import tf_transform_unconverted, worker_name
from trainer.spec import CHECKPOINT_SUBDIR, run_spec
from trainer.strategy import choose_strategy, describe

__all__ = [
    "RESULT_FILE",
    "TrainingJob",
    "TrainingResult",
    "run_trainer",
    "load_hyperparameters",
    "read_result",
]

RESULT_FILE = "training_result.json"
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainingJob(ModelJob):
    """Everything a worker needs to train (plain values: it travels as a Beam element).

    The fields of :class:`trainer.job.ModelJob` (module, data, steps, custom_config,
    entry point), and:

    Attributes:
      serving_model_dir: where the serving SavedModel goes (stable per run).
      model_run_dir: logs, checkpoints and the completion marker (stable per run).
      hyperparameters: a Keras Tuner HyperParameters config, or None.
      base_model: a SavedModel folder to warm-start from, or None.
      logical_cpus: for tests: mirror over this many logical CPU devices when no GPU.
      logical_gpus: for tests: split the first GPU into this many logical GPUs.
    """

    serving_model_dir: str
    model_run_dir: str
    hyperparameters: Optional[Mapping[str, Any]] = None
    base_model: Optional[str] = None
    logical_cpus: int = 0
    logical_gpus: int = 0


@dataclasses.dataclass(frozen=True)
class TrainingResult:
    """What a training job did (or, with ``error``, why it could not).

    Attributes:
      serving_model_dir / model_run_dir: the job's folders.
      module_kind: ``run_fn`` or ``spec``.
      metrics: evaluation metrics (from the spec runner, from a dict ``run_fn`` returned,
        or else the last values the module logged to TensorBoard's ``validation`` folder).
      num_replicas / devices / strategy: the strategy the runner handed to the module.
      start_step / final_step: the step counter at start and end (spec runner only: a
        ``run_fn``'s loop is its own).
      start_epoch: the epochs a ``run_fn``'s Keras ``BackupAndRestore`` backup had
        finished when this attempt began (it resumes after them); None when there was none.
      resumed_from: the checkpoint or backup folder this attempt resumed from, or None.
      seconds: wall time of the attempt that trained.
      reused: True when a completed earlier attempt was found and nothing was redone.
      worker: host and process that ran it (the chief, with several workers).
      workers: the workers that trained together (``--train_workers``).
      error: a user error message (no retry helps); the other fields are then empty.
    """

    serving_model_dir: str
    model_run_dir: str
    module_kind: str = ""
    metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
    num_replicas: int = 0
    devices: tuple[str, ...] = ()
    strategy: str = ""
    start_step: Optional[int] = None
    final_step: Optional[int] = None
    start_epoch: Optional[int] = None
    resumed_from: Optional[str] = None
    seconds: float = 0.0
    reused: bool = False
    worker: str = ""
    workers: int = 1
    error: Optional[str] = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainingResult:
        d = json.loads(text)
        d["devices"] = tuple(d.get("devices", ()))
        return cls(**d)

    @classmethod
    def failed(cls, job: TrainingJob, message: str) -> TrainingResult:
        return cls(job.serving_model_dir, job.model_run_dir, error=message, worker=worker_name())


def load_hyperparameters(path: str) -> dict[str, Any]:
    """Reads a hyperparameters JSON file as a Keras Tuner ``HyperParameters`` config.

    The file is either a config (``{"space": [...], "values": {...}}``, as
    ``HyperParameters.get_config()`` writes and the tuner stage outputs) or a plain
    ``{"name": value}`` object, turned into fixed hyperparameters.

    Raises:
      PipelineError: the file is missing, not JSON, or not a hyperparameters object.
    """
    import keras_tuner

    if not fileio.exists(path):
        raise PipelineError(
            f"--hyperparameters file {path} does not exist; pass a Keras Tuner config JSON "
            "(e.g. the tuner's best_hyperparameters.json)."
        )
    try:
        data = json.loads(fileio.read_file(path))
    except ValueError as e:
        raise PipelineError(
            f"--hyperparameters file {path} is not valid JSON ({e}); fix the file."
        ) from None
    if not isinstance(data, dict):
        raise PipelineError(
            f"--hyperparameters file {path} holds a {type(data).__name__}, not a JSON object; "
            'write {"name": value, ...} or a HyperParameters.get_config() object.'
        )
    if "space" not in data and "values" not in data:
        hp = keras_tuner.HyperParameters()
        for name, value in data.items():
            hp.Fixed(name, value)
        return hp.get_config()
    try:
        keras_tuner.HyperParameters.from_config(data)
    except Exception as e:  # noqa: BLE001  keras-tuner raises assorted errors on bad configs
        raise PipelineError(
            f"--hyperparameters file {path} is not a Keras Tuner HyperParameters config "
            f"({type(e).__name__}: {e}); write HyperParameters.get_config() as JSON."
        ) from None
    return data


def read_result(model_run_dir: str) -> Optional[TrainingResult]:
    """The completion marker of ``model_run_dir``, or None when training did not finish."""

    path = fileio.join(model_run_dir, RESULT_FILE)
    if not fileio.exists(path):
        return None
    return TrainingResult.from_json(fileio.read_file(path))


def _write_result(result: TrainingResult) -> None:

    path = fileio.join(result.model_run_dir, RESULT_FILE)
    fileio.write_atomic(path, result.to_json())


def _tensorboard_metrics(model_run_dir: str) -> dict[str, float]:
    """The last value of each ``epoch_*`` scalar Keras's TensorBoard logged for validation."""
    import tensorflow as tf

    latest: dict[str, tuple[int, float, float]] = {}
    pattern = fileio.join(model_run_dir, "validation", "events.out.tfevents.*")
    for path in fileio.glob(pattern):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if not value.tag.startswith("epoch_"):
                    continue
                number = (
                    float(tf.make_ndarray(value.tensor))
                    if value.HasField("tensor")
                    else float(value.simple_value)
                )
                key = value.tag[len("epoch_") :]
                seen = latest.get(key)
                if seen is None or (event.step, event.wall_time) >= seen[:2]:
                    latest[key] = (event.step, event.wall_time, number)
    return {k: v[2] for k, v in sorted(latest.items())}


# Where Keras's BackupAndRestore keeps its state (Keras 3.15, pinned): a folder holding
# this file, {"epoch": epochs finished, "batch": ...}; the restore starts after that epoch.
_KERAS_BACKUP_STATE = "training_metadata.json"


# Where Keras 2's (tf_keras 2.21) BackupAndRestore keeps its state, which a run_fn on
# several workers uses: a TensorFlow checkpoint in <backup>/chief (the other workers' copies
# are removed) whose variable holds the index of the last epoch finished (-1: none).
_TF_KERAS_BACKUP_STATE = ("chief", "checkpoint")
_TF_KERAS_EPOCH = "ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE"


def _tf_keras_epochs(chief_dir: str) -> int:
    """The epochs a Keras 2 backup's checkpoint in ``chief_dir`` had finished (0: none or
    unreadable)."""
    import tensorflow as tf

    try:
        prefix = tf.train.latest_checkpoint(chief_dir)
        if prefix is None:
            return 0
        return int(tf.train.load_checkpoint(prefix).get_tensor(_TF_KERAS_EPOCH)) + 1
    except (tf.errors.OpError, ValueError, TypeError):
        return 0  # not Keras 2's checkpoint, or damaged: nothing to report


def _keras_backup(model_run_dir: str) -> Optional[tuple[str, int]]:
    """(the backup folder, the epochs it had finished) of a Keras 3 or Keras 2
    ``BackupAndRestore`` that an earlier attempt left in ``model_run_dir`` (the folder
    itself or one or two levels down, where a module puts its backup), or None when none
    had finished an epoch."""
    for depth in range(3):
        found = fileio.glob(fileio.join(model_run_dir, *["*"] * depth, _KERAS_BACKUP_STATE))
        for path in sorted(found):
            try:
                epoch = int(json.loads(fileio.read_file(path)).get("epoch", 0))
            except (ValueError, TypeError, AttributeError):
                continue  # not Keras's file: nothing to report
            if epoch > 0:
                return path[: -len(_KERAS_BACKUP_STATE) - 1], epoch
        pattern = fileio.join(model_run_dir, *["*"] * depth, *_TF_KERAS_BACKUP_STATE)
        for path in sorted(fileio.glob(pattern)):
            chief = os.path.dirname(path)
            epoch = _tf_keras_epochs(chief)
            if epoch > 0:
                return os.path.dirname(chief), epoch
    return None


def _spec_checkpoints(job: TrainingJob, start_step: Optional[int]) -> Optional[str]:
    """The spec runner's checkpoint folder when it resumed from it (start_step > 0)."""
    return fileio.join(job.model_run_dir, CHECKPOINT_SUBDIR) if start_step else None


def _fn_args(
    job: TrainingJob,
    strategy,
    working_dir: Optional[str] = None,
    serving_model_dir: Optional[str] = None,
) -> FnArgs:
    return common_fn_args(
        job,
        working_dir or job.model_run_dir,
        strategy=strategy,
        data_accessor=DataAccessor(workers=_workers(strategy)),
        serving_model_dir=serving_model_dir or job.serving_model_dir,
        eval_model_dir=fileio.join(job.model_run_dir, "eval_model"),
        model_run_dir=job.model_run_dir,
        base_model=job.base_model,
        hyperparameters=dict(job.hyperparameters) if job.hyperparameters else None,
    )


def _run_user_code(loaded: TrainerModule, fn_args: FnArgs, doing: Callable[[str], None]):
    """Runs run_fn or the spec; an exception in user code becomes one actionable line."""
    what = "run_fn" if loaded.kind is ModuleKind.RUN_FN else loaded.spec_class.__name__
    doing(f"{what} in {loaded.path}")
    try:
        if loaded.kind is ModuleKind.RUN_FN:
            # --mixed_precision for run_fn too: its model is built under Keras's global
            # policy (a module that sets fn_args.mixed_precision itself sets the same).
            with policy_scope(fn_args.mixed_precision):
                return loaded.run_fn(fn_args)
        return run_spec(loaded.spec_class, fn_args)
    except PipelineError:
        raise
    except Exception as e:  # noqa: BLE001  user code: report where it failed, do not retry
        # The traceback for the log (run.log, the worker's log), not the terminal, where
        # the sentence below is the whole error.
        _LOG.info("Training with %s from %s failed.", what, loaded.path, exc_info=True)
        where = error_place(e, loaded.module.__file__ or loaded.path, loaded.path)
        fix = "fix the module file"
        sentence = label_outside_vocabulary(e, f"{what} in {where}")
        if sentence:
            raise PipelineError(sentence) from None
        workers = _workers(fn_args.strategy)
        if workers > 1 and _is_keras3_fit_per_replica(e):
            raise PipelineError(
                f"{what} in {where} trains a Keras 3 model under --train_workers={workers}'s "
                "MultiWorkerMirroredStrategy, whose fit Keras 3 cannot run (TensorFlow: "
                "Attempt to convert a value (PerReplica...) to a Tensor); build and fit the "
                "model with Keras 2 (import tf_keras as keras) in the module, or pass "
                "--train_workers=1, or train with a TrainSpec (--trainer_entry_point=<its "
                "class>)."
            ) from None
        if _is_keras_save(e):
            fix = (
                "Keras 3's model.save writes only .keras/.h5 files, which TF Serving cannot "
                "serve: export a SavedModel with tf.saved_model.save(model, "
                "fn_args.serving_model_dir) or model.export(fn_args.serving_model_dir) "
                "instead"
            )
        raise PipelineError(
            f"{what} in {where} raised {type(e).__name__} ({first_line(e)}); {fix} (the "
            "full traceback is in the run's log, or the worker's)."
        ) from None


# Keras's sparse categorical loss given a label id outside [0, classes): -1 is what
# tf.Transform's vocabulary (built from the train split) gives a value it never saw.
_LABEL_OUTSIDE_VOCABULARY = re.compile(
    r"Received a label value of (-1) which is outside the valid range of \[0, (\d+)\)"
)


def label_outside_vocabulary(error: BaseException, code: str) -> Optional[str]:
    """The sentence for Keras's loss given label -1 (an eval label value no train row has)
    by ``code`` ("run_fn in m.py:12"), None for any other error: the Trainer and every
    tuning trial fail on it alike, and no retry or other hyperparameter can mend it."""
    unknown = _LABEL_OUTSIDE_VOCABULARY.search(str(error))
    if unknown is None:
        return None
    return (
        f"{code} was given label {unknown.group(1)}, outside the model's {unknown.group(2)} "
        f"classes (TensorFlow: {unknown.group(0)}): the eval split holds a label value that "
        "no train row has, which the vocabulary tf.Transform builds from the train split "
        "maps to -1; give the train split rows of every label value (more rows: a data set "
        "this small splits unevenly) or drop the rare label's rows."
    )


# Keras 3's refusals of TF 2's model.save(dir) / model.save(dir, save_format="tf"), which
# TFX's docs and module files use (keras/src/saving/saving_api.py, Keras pinned).
_KERAS_SAVE_ERRORS = ("`save_format` argument is deprecated", "Invalid filepath extension")


def _is_keras_save(e: Exception) -> bool:
    return isinstance(e, ValueError) and any(m in str(e) for m in _KERAS_SAVE_ERRORS)


# Keras 3's fit under MultiWorkerMirroredStrategy (Keras 3.15, TF 2.21; also with
# run_eagerly=True, or jit_compile=False and steps_per_execution=1): its data adapter hands
# the distributed batch (PerReplica values) to a step that converts it to a tensor, and
# fails with "Attempt to convert a value ({...: PerReplica:{...}}) with an unsupported type
# (<class 'dict'>) to a Tensor". tf_keras (Keras 2) fits under the same strategy, so the
# error's fix is the module's Keras, which a 200-line traceback does not say.
_PER_REPLICA_CONVERSION = ("Attempt to convert a value", "PerReplica", "to a Tensor")
_KERAS3_SOURCE = os.sep + os.path.join("keras", "src") + os.sep


def _is_keras3_fit_per_replica(e: Exception) -> bool:
    """Whether ``e`` is Keras 3's failure to fit under a multi-worker strategy (raised in
    Keras 3's own code, ``keras/src``; tf_keras lives in ``tf_keras/src``)."""
    import traceback

    if not isinstance(e, ValueError) or not all(m in str(e) for m in _PER_REPLICA_CONVERSION):
        return False
    return any(_KERAS3_SOURCE in frame.filename for frame in traceback.extract_tb(e.__traceback__))


def _workers(strategy) -> int:
    """The workers of a multi-worker strategy's cluster (1 for any other strategy)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    return max(1, resolver.cluster_spec().num_tasks("worker"))


def _nothing(what: str) -> None:
    pass


def run_trainer(
    job: TrainingJob,
    doing: Callable[[str], None] = _nothing,
    *,
    strategy: Any = None,
    scratch: Optional[str] = None,
) -> TrainingResult:
    """Runs one training job to a checked serving SavedModel.

    Args:
      job: what to train.
      doing: told what user code runs next ("run_fn in m.py"), so that a caller that runs
        this in a process of its own (:func:`trainer.isolation.run_isolated`) can name it
        when that process ends or times out.
      strategy: the strategy to train under (a worker of a multi-worker training); None:
        the local devices' (:func:`trainer.strategy.choose_strategy`).
      scratch: a non-chief worker's folder (``fn_args.working_dir``): its checkpoints,
        logs and export go there, and it writes no result.

    Returns:
      the :class:`TrainingResult` (``reused=True`` when a finished attempt was found).

    Raises:
      PipelineError: a user error: the module file, its run_fn/spec, or its export.
    """
    import tensorflow as tf

    tf_transform_unconverted()  # a process not forked from the warm fork server (a worker)
    previous = read_result(job.model_run_dir)
    if previous is not None and tf.saved_model.contains_saved_model(job.serving_model_dir):
        _LOG.info("Training in %s already finished; not redone.", job.model_run_dir)
        return dataclasses.replace(previous, reused=True)

    start = time.time()
    doing(f"Module file {job.module_file}, while being imported,")
    loaded = job.load_module()
    if loaded.kind is ModuleKind.NONE:
        raise PipelineError(
            f"Module file {job.module_file} defines no run_fn(fn_args) and no TrainSpec "
            "subclass; add one to train a model."
        )
    fileio.makedirs(job.model_run_dir)
    serving_model_dir = job.serving_model_dir
    if scratch:
        serving_model_dir = os.path.join(
            scratch, os.path.relpath(serving_model_dir, job.model_run_dir)
        )
    if fileio.exists(serving_model_dir):
        # Left by an attempt killed while exporting: the next export must start clean.
        fileio.rmtree(serving_model_dir)
    if strategy is None:
        strategy = choose_strategy(job.logical_cpus, job.logical_gpus)
    info = describe(strategy)
    _LOG.info("Training on %d replica(s): %s", info.num_replicas, ", ".join(info.devices))
    # Every worker's run_fn saves its model (the savers of a multi-worker strategy may meet in
    # collectives), each where fn_args says: the chief into the run, the others into their
    # scratch. A TrainSpec's export finds its own folder (trainer.spec).
    fn_args = _fn_args(
        job, strategy, scratch, serving_model_dir if loaded.kind is ModuleKind.RUN_FN else None
    )
    backup = _keras_backup(job.model_run_dir) if loaded.kind is ModuleKind.RUN_FN else None
    returned = _run_user_code(loaded, fn_args, doing)
    doing(f"The export check of {serving_model_dir}")
    export.check_serving_model(serving_model_dir, job.module_file)

    start_step = final_step = None
    if loaded.kind is ModuleKind.SPEC:
        metrics, start_step, final_step = returned.metrics, returned.start_step, returned.final_step
    elif isinstance(returned, Mapping):
        metrics = {str(k): float(v) for k, v in returned.items()}
    else:
        metrics = _tensorboard_metrics(job.model_run_dir)
    result = TrainingResult(
        serving_model_dir=job.serving_model_dir,
        model_run_dir=job.model_run_dir,
        module_kind=loaded.kind.value,
        metrics=metrics,
        num_replicas=info.num_replicas,
        devices=info.devices,
        strategy=info.name,
        start_step=start_step,
        final_step=final_step,
        start_epoch=backup[1] if backup else None,
        resumed_from=backup[0] if backup else (_spec_checkpoints(job, start_step)),
        seconds=round(time.time() - start, 3),
        worker=worker_name(),
        workers=_workers(strategy),
    )
    if not scratch:
        _write_result(result)
    return result
