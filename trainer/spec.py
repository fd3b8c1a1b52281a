"""The class-based training contract: one ``TrainSpec`` subclass, and the runner owns the loop.

In the spirit of ElasticDL's TrainSpec and Determined's Trial: the members of one object
give the model, loss, optimizer, metrics and datasets for a set of hyperparameters, and
share state through ``self`` (no globals). The runner (:func:`run_spec`) does the rest:

- builds the model, optimizer and metrics inside the worker's strategy scope
  (``MirroredStrategy`` over the local GPUs), so training is data-parallel; with
  ``--train_workers`` above 1, ``MultiWorkerMirroredStrategy`` across workers, trained
  by the runner's own loop (:mod:`trainer.loop`: Keras 3's ``fit`` cannot run there);
- trains ``fn_args.train_steps`` steps in intervals of ``checkpoint_every`` steps, saving a
  checkpoint (model and optimizer, step counter included) in
  ``<model_run_dir>/checkpoints`` after each; a retried attempt restores the latest one and
  continues from its step, and TensorBoard logs land in ``model_run_dir``;
- evaluates ``fn_args.eval_steps`` batches with Keras metrics, whose state variables are
  summed across replicas before ``result()``: an AUC comes from the merged confusion
  counts of all replicas, never from an average of per-replica AUCs;
- exports a SavedModel whose ``serving_default`` parses serialized tf.Examples, applies
  the tf.Transform graph and runs the model.

Example (a module file)::

    from trainer import TrainSpec

    class PenguinSpec(TrainSpec):
        label_key = "species_xf"
        raw_label_keys = ("species",)

        def model(self, hp):
            inputs = {k: keras.Input(shape=(1,), name=k) for k in FEATURES}
            ...
            return keras.Model(inputs, outputs)

        def loss(self, hp):
            return keras.losses.SparseCategoricalCrossentropy(from_logits=True)
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional

if TYPE_CHECKING:
    import keras
    import keras_tuner
    import tensorflow as tf
    import tensorflow_transform as tft

    from trainer.fn_args import FnArgs

__all__ = [
    "CHECKPOINT_SUBDIR",
    "EVAL_LOG_SUBDIR",
    "SpecOutcome",
    "TrainSpec",
    "compile_model",
    "make_spec",
    "model_datasets",
    "run_spec",
    "steps_per_execution",
]

CHECKPOINT_SUBDIR = "checkpoints"
EVAL_LOG_SUBDIR = "eval"


class TrainSpec:
    """Base class of a module file's training spec; subclass it and fill in the members.

    The runner creates the subclass with no arguments, sets :attr:`fn_args` and
    :attr:`tf_transform_output`, calls :meth:`setup` once, then the other members with
    the run's hyperparameters (``keras_tuner.HyperParameters``).

    Class attributes:
      label_key: the transformed label feature (used by the default datasets).
      raw_label_keys: raw features that serving requests do not carry (the raw label).
      batch_size / eval_batch_size: global batch sizes (split across replicas).
      checkpoint_every: training steps between checkpoints.
      cache_max_mib: the default training dataset is kept in memory, parsed, after its
        first pass when the split's files take at most this many MiB on disk (0: never):
        later passes cost neither decompression nor parsing, and the order of its
        batches is reshuffled every pass (their contents are those of the first pass).
      steps_per_execution: training steps per call into TensorFlow (Keras's
        ``steps_per_execution``), fewer Python round trips per step; None: the largest
        divisor of the checkpoint interval up to 32 (each ``fit`` covers whole calls).
    """

    label_key: ClassVar[Optional[str]] = None
    raw_label_keys: ClassVar[Sequence[str]] = ()
    batch_size: ClassVar[int] = 64
    eval_batch_size: ClassVar[int] = 64
    checkpoint_every: ClassVar[int] = 100
    cache_max_mib: ClassVar[int] = 256
    steps_per_execution: ClassVar[Optional[int]] = None

    fn_args: FnArgs
    tf_transform_output: tft.TFTransformOutput

    def setup(self) -> None:
        """Called once before the other members; keep shared state on ``self``."""

    def default_hyperparameters(self) -> keras_tuner.HyperParameters:
        """The hyperparameters used when the run has none (no tuner, no --hyperparameters)."""
        import keras_tuner

        return keras_tuner.HyperParameters()

    def model(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        """The model, taking the transformed features; built inside the strategy scope."""
        raise NotImplementedError(f"{type(self).__name__} must define model(self, hp).")

    def loss(self, hp: keras_tuner.HyperParameters) -> Any:
        """A Keras loss (object or name)."""
        raise NotImplementedError(f"{type(self).__name__} must define loss(self, hp).")

    def optimizer(self, hp: keras_tuner.HyperParameters) -> keras.optimizers.Optimizer:
        """The optimizer; by default Adam with ``hp['learning_rate']`` (or 1e-3)."""
        import keras

        rate = hp.get("learning_rate") if "learning_rate" in hp.values else 1e-3
        return keras.optimizers.Adam(rate)

    def metrics(self, hp: keras_tuner.HyperParameters) -> list:
        """Keras metrics to compute in training and evaluation."""
        return []

    def _dataset(self, files: Sequence[str], batch_size: int) -> tf.data.Dataset:
        from tfx_bsl.public import tfxio

        if not self.label_key:
            raise NotImplementedError(
                f"{type(self).__name__} must set label_key or define train_dataset and "
                "eval_dataset."
            )
        return self.fn_args.data_accessor.tf_dataset_factory(
            files,
            tfxio.TensorFlowDatasetOptions(batch_size=batch_size, label_key=self.label_key),
            self.tf_transform_output.transformed_metadata.schema,
        )

    def _cached_dataset(self, files: Sequence[str], batch_size: int, batches: int):
        import tensorflow as tf
        from tfx_bsl.public import tfxio

        # One pass (TFXIO's reading, shuffling and parsing), then the parsed batches from
        # memory: a gzip file is decompressed by one thread, which bounds a fast
        # accelerator's step rate, and parsing again each pass buys nothing.
        once = self.fn_args.data_accessor.tf_dataset_factory(
            files,
            tfxio.TensorFlowDatasetOptions(
                batch_size=batch_size,
                label_key=self.label_key,
                num_epochs=1,
                drop_final_batch=True,
            ),
            self.tf_transform_output.transformed_metadata.schema,
        )
        return (
            once.cache()
            .shuffle(batches, reshuffle_each_iteration=True)
            .repeat()
            .prefetch(tf.data.AUTOTUNE)
        )

    def train_dataset(self, hp: keras_tuner.HyperParameters) -> tf.data.Dataset:
        """Endless batches of (features, label) for training (global batch size); kept in
        memory after the first pass when the split is small (see ``cache_max_mib``)."""
        files = self.fn_args.train_files
        if self.label_key and _files_mib(files) <= self.cache_max_mib:
            examples = self.fn_args.num_examples.get("train", 0)
            if examples >= self.batch_size:
                return self._cached_dataset(files, self.batch_size, examples // self.batch_size)
        return self._dataset(files, self.batch_size)

    def eval_dataset(self, hp: keras_tuner.HyperParameters) -> tf.data.Dataset:
        """Batches of (features, label) for evaluation; ``eval_steps`` of them are read."""
        return self._dataset(self.fn_args.eval_files, self.eval_batch_size)

    def serving_outputs(self, predictions: tf.Tensor) -> Mapping[str, tf.Tensor]:
        """The serving signature's outputs from the model's output."""
        return {"outputs": predictions}


@dataclasses.dataclass(frozen=True)
class SpecOutcome:
    """What :func:`run_spec` did.

    Attributes:
      metrics: evaluation metrics (``loss`` and the spec's metrics).
      start_step: the step training started from (restored from a checkpoint, else 0).
      final_step: the optimizer's step counter at the end.
    """

    metrics: dict[str, float]
    start_step: int
    final_step: int


def make_spec(spec_class: type[TrainSpec], fn_args: FnArgs) -> TrainSpec:
    """The module's spec, ready for use: ``fn_args`` and the tf.Transform output set, set up.

    Training (:func:`run_spec`) and tuning (a trial's HyperModel) make theirs here.
    """
    import tensorflow_transform as tft

    spec = spec_class()
    spec.fn_args = fn_args
    spec.tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
    spec.setup()
    return spec


def compile_model(spec: TrainSpec, hp: keras_tuner.HyperParameters) -> keras.Model:
    """The spec's model for ``hp``, compiled with its optimizer, loss and metrics; built
    under ``fn_args.mixed_precision``'s policy when set (its layers keep it)."""
    from trainer.precision import policy_scope

    with policy_scope(spec.fn_args.mixed_precision):
        model = spec.model(hp)
        model.compile(optimizer=spec.optimizer(hp), loss=spec.loss(hp), metrics=spec.metrics(hp))
    return model


def model_datasets(
    spec: TrainSpec, hp: keras_tuner.HyperParameters, model: keras.Model
) -> tuple[tf.data.Dataset, tf.data.Dataset]:
    """The spec's (train, eval) datasets for ``hp``, holding only ``model``'s inputs."""
    import trainer.export as export

    names = export.model_input_names(model)
    return (
        _select_inputs(spec.train_dataset(hp), names),
        _select_inputs(spec.eval_dataset(hp), names),
    )


def _files_mib(patterns: Sequence[str]) -> float:
    """Total size in MiB of the files matching ``patterns``."""
    from beam_pipeline.core import fileio

    return sum(fileio.size(f) for p in patterns for f in fileio.glob(p)) / 2**20


def steps_per_execution(spec: TrainSpec, *lengths: int) -> int:
    """The spec's ``steps_per_execution``, or the largest divisor up to 32 of every fit's
    length (Keras runs whole calls: a call that crossed the end of a fit would train
    steps past a checkpoint boundary).

    Raises:
      ValueError: the spec's own value does not divide a fit's length.
    """
    import math

    lengths = tuple(n for n in lengths if n > 0) or (1,)
    whole = math.gcd(*lengths)
    if spec.steps_per_execution is not None:
        if whole % spec.steps_per_execution:
            raise ValueError(
                f"{type(spec).__name__}.steps_per_execution={spec.steps_per_execution} does "
                f"not divide the training's fit lengths {list(lengths)} (checkpoint_every and "
                "train_steps); pick a divisor of them or leave it None."
            )
        return spec.steps_per_execution
    return max(d for d in range(1, min(32, whole) + 1) if whole % d == 0)


def _select_inputs(dataset: tf.data.Dataset, names: Optional[list[str]]) -> tf.data.Dataset:
    """Keeps only the model's inputs in (features, label) elements (no structure warnings)."""
    spec = dataset.element_spec
    if names is None or not (isinstance(spec, tuple) and isinstance(spec[0], Mapping)):
        return dataset
    return dataset.map(lambda features, label: ({k: features[k] for k in names}, label))


def _checkpoint_callback(manager: tf.train.CheckpointManager):
    import keras

    class _SaveCheckpoint(keras.callbacks.Callback):
        """Saves model + optimizer at each epoch end (an epoch is one checkpoint interval)."""

        def on_epoch_end(self, epoch, logs=None):
            manager.save(checkpoint_number=int(self.model.optimizer.iterations.numpy()))

    return _SaveCheckpoint()


def _is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def _own_dir(strategy: tf.distribute.Strategy, fn_args: FnArgs, path: str) -> str:
    """``path`` for the chief (and a single worker); a non-chief's twin in its scratch
    folder (``fn_args.working_dir``, removed by its caller), since savers must all write."""
    if not _is_multi_worker(strategy) or strategy.extended.should_checkpoint:
        return path
    return os.path.join(fn_args.working_dir, os.path.relpath(path, fn_args.model_run_dir))


def _train_with_loop(spec, hp, model, strategy, datasets, manager, start_step, interval):
    """Trains, evaluates and exports with the runner's own loop (:mod:`trainer.loop`):
    multi-worker training, where Keras 3's ``fit`` cannot run. Returns (final step,
    evaluation metrics)."""
    import trainer.export as export
    from trainer.loop import evaluate_loop, lose_worker_hook, shard_per_worker, train_loop

    fn_args = spec.fn_args
    workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
    train_ds = shard_per_worker(datasets[0], fn_args.train_files, workers)
    eval_ds = shard_per_worker(datasets[1], fn_args.eval_files, workers)
    with strategy.scope():
        train_metrics, eval_metrics = spec.metrics(hp), spec.metrics(hp)
    loss = spec.loss(hp)
    run_dir = _own_dir(strategy, fn_args, fn_args.model_run_dir)
    checkpoints = os.path.join(fn_args.model_run_dir, CHECKPOINT_SUBDIR)

    def save(step: int) -> None:
        manager.save(checkpoint_number=step)
        lose_worker_hook(step, checkpoints)

    final_step = train_loop(
        model,
        train_ds,
        strategy,
        loss=loss,
        start_step=start_step,
        train_steps=int(fn_args.train_steps or 0),
        interval=interval,
        save=save,
        log_dir=run_dir,
        metrics=train_metrics,
        steps_per_call=steps_per_execution(
            spec, interval, int(fn_args.train_steps or 0) % interval
        ),
    )
    metrics = evaluate_loop(
        model, eval_ds, strategy, loss=loss, steps=fn_args.eval_steps, metrics=eval_metrics
    )
    _write_eval_summaries(os.path.join(run_dir, EVAL_LOG_SUBDIR), metrics, final_step)
    export.export_serving_model(
        model,
        spec.tf_transform_output,
        _own_dir(strategy, fn_args, fn_args.serving_model_dir),
        raw_label_keys=spec.raw_label_keys,
        outputs=spec.serving_outputs,
        schema_path=fn_args.schema_path,
        label_key=spec.label_key,
    )
    return final_step, metrics


def _write_eval_summaries(log_dir: str, metrics: Mapping[str, float], step: int) -> None:
    import tensorflow as tf

    writer = tf.summary.create_file_writer(log_dir)
    with writer.as_default():
        for name, value in metrics.items():
            tf.summary.scalar(f"epoch_{name}", value, step=step)
    writer.close()


def run_spec(spec_class: type[TrainSpec], fn_args: FnArgs) -> SpecOutcome:
    """Trains, evaluates and exports with a TrainSpec; resumes from a checkpoint if any.

    Args:
      spec_class: the module's TrainSpec subclass.
      fn_args: the run's arguments; ``fn_args.strategy`` is used when set.

    Returns:
      the evaluation metrics and the step counter at start and end.
    """
    import keras
    import keras_tuner
    import tensorflow as tf

    import trainer.export as export

    spec = make_spec(spec_class, fn_args)
    hp = (
        keras_tuner.HyperParameters.from_config(fn_args.hyperparameters)
        if fn_args.hyperparameters
        else spec.default_hyperparameters()
    )
    strategy = fn_args.strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = compile_model(spec, hp)
        if model.built:  # optimizer slots exist before a checkpoint is restored into them
            model.optimizer.build(model.trainable_variables)
    train_ds, eval_ds = model_datasets(spec, hp, model)

    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    checkpoints = os.path.join(fn_args.model_run_dir, CHECKPOINT_SUBDIR)
    # Every worker of a multi-worker strategy saves (saving is collective); only the chief
    # into model_run/, the others into their scratch folder. All restore the chief's.
    manager = tf.train.CheckpointManager(
        checkpoint, _own_dir(strategy, fn_args, checkpoints), max_to_keep=2
    )
    latest = tf.train.latest_checkpoint(checkpoints)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
    elif fn_args.base_model:
        export.warm_start(model, fn_args.base_model)
    start_step = int(model.optimizer.iterations.numpy())

    train_steps = int(fn_args.train_steps or 0)
    interval = max(1, min(spec.checkpoint_every, train_steps or 1))
    if _is_multi_worker(strategy):
        final_step, metrics = _train_with_loop(
            spec, hp, model, strategy, (train_ds, eval_ds), manager, start_step, interval
        )
        return SpecOutcome(metrics=metrics, start_step=start_step, final_step=final_step)
    callbacks = [
        keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch"),
        _checkpoint_callback(manager),
    ]
    # Epochs are checkpoint intervals, so a restored step is always an epoch boundary and
    # Keras resumes at `initial_epoch`; a last, shorter interval is a second fit call.
    full_epochs, remainder = divmod(train_steps, interval)
    # Set before the first fit builds its train function (evaluation below goes back to 1).
    model.steps_per_execution = steps_per_execution(spec, interval, remainder)
    if start_step < full_epochs * interval:
        model.fit(
            train_ds,
            steps_per_epoch=interval,
            epochs=full_epochs,
            initial_epoch=start_step // interval,
            callbacks=callbacks,
            verbose=0,
        )
    if remainder and int(model.optimizer.iterations.numpy()) < train_steps:
        model.fit(
            train_ds,
            steps_per_epoch=remainder,
            epochs=full_epochs + 1,
            initial_epoch=full_epochs,
            callbacks=callbacks,
            verbose=0,
        )
    final_step = int(model.optimizer.iterations.numpy())

    model.steps_per_execution = 1  # evaluate exactly eval_steps batches
    results = model.evaluate(eval_ds, steps=fn_args.eval_steps, return_dict=True, verbose=0)
    metrics = {k: float(v) for k, v in results.items()}
    _write_eval_summaries(os.path.join(fn_args.model_run_dir, EVAL_LOG_SUBDIR), metrics, final_step)

    export.export_serving_model(
        model,
        spec.tf_transform_output,
        fn_args.serving_model_dir,
        raw_label_keys=spec.raw_label_keys,
        outputs=spec.serving_outputs,
        schema_path=fn_args.schema_path,
        label_key=spec.label_key,
    )
    return SpecOutcome(metrics=metrics, start_step=start_step, final_step=final_step)
