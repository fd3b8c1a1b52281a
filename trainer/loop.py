"""A training loop the runner owns: ``strategy.run`` over a distributed dataset.

Keras 3's ``model.fit`` cannot train under ``MultiWorkerMirroredStrategy`` (it fails
converting a ``PerReplica`` value to a tensor), so a :class:`~trainer.spec.TrainSpec`
trained by several workers runs this loop instead: one ``tf.function`` step per call that
each replica runs on its share of the global batch (``strategy.run``), a gradient tape,
and the Keras optimizer's ``apply_gradients``, which sums the replicas' gradients. The
loss is the spec's, averaged over the global batch; the spec's metrics are Keras metrics
whose state the strategy sums across replicas and workers before ``result()``.

Checkpoints come at the same steps as the ``fit`` path's (every ``checkpoint_every``
steps and at the end), through the same ``tf.train.CheckpointManager``, and TensorBoard
gets ``epoch_loss`` (and each metric) per interval in ``<log_dir>/train``, so a resumed
run's curve continues at the restored step.

Example::

    steps = train_loop(model, train_ds, strategy, start_step=0, train_steps=200,
                       interval=100, save=manager.save, log_dir=run_dir, metrics=[acc])
    results = evaluate_loop(model, eval_ds, strategy, steps=5, metrics=[acc2])
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import keras
    import tensorflow as tf

__all__ = [
    "ATTEMPT_ENV",
    "LOSE_WORKER_ENV",
    "evaluate_loop",
    "lose_worker_hook",
    "shard_per_worker",
    "train_loop",
]

# The attempt a multi-worker training process runs (set by trainer.multiworker).
ATTEMPT_ENV = "BEAM_PIPELINE_TRAIN_ATTEMPT"
# A test hook: "<rank>:<attempt>" (several: comma-separated) makes that worker's process
# exit (os._exit) right after its first checkpoint of that attempt, once the chief's
# checkpoint of that step is complete, as a lost worker would: a deterministic loss, no
# timing involved.
LOSE_WORKER_ENV = "BEAM_PIPELINE_TEST_LOSE_WORKER"
_POLL_S = 0.2


def shard_per_worker(dataset: tf.data.Dataset, files: Sequence[str], workers: int):
    """``dataset`` with the auto-shard policy that gives each worker a share: by file
    when there are at least as many files as workers, else by data (every worker reads
    all, keeps every N-th batch). tf.data's AUTO would shard one file by file and leave
    the other workers nothing: an endless dataset would end at once for them."""
    import tensorflow as tf

    from beam_pipeline.core import fileio

    matched = sum(len(fileio.glob(p)) for p in files)
    policy = tf.data.experimental.AutoShardPolicy
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        policy.FILE if matched >= workers else policy.DATA
    )
    return dataset.with_options(options)


def _loss_fn(model: keras.Model, loss: Any, strategy: tf.distribute.Strategy):
    """The per-replica loss: the spec's loss summed over the local examples, divided by
    the global batch (so summing the replicas' gradients gives the global mean's)."""
    import keras
    import tensorflow as tf

    loss_object = keras.losses.get(loss) if isinstance(loss, str) else loss
    num_replicas = strategy.num_replicas_in_sync

    def compute(labels, predictions):
        per_example = loss_object(labels, predictions)
        # Keras losses return the local batch's mean: scale it to a share of the global one.
        value = tf.cast(per_example, tf.float32) / num_replicas
        if model.losses:  # regularization terms count once per global step
            value += tf.add_n([tf.cast(x, tf.float32) for x in model.losses]) / num_replicas
        return value

    return compute


def _log(writer, values: dict[str, float], step: int) -> None:
    import tensorflow as tf

    if writer is None:
        return
    with writer.as_default():
        for name, value in values.items():
            tf.summary.scalar(f"epoch_{name}", value, step=step)
    writer.flush()


def train_loop(
    model: keras.Model,
    dataset: tf.data.Dataset,
    strategy: tf.distribute.Strategy,
    *,
    loss: Any,
    start_step: int,
    train_steps: int,
    interval: int,
    save: Callable[[int], Any],
    log_dir: Optional[str],
    metrics: Sequence[Any] = (),
    steps_per_call: int = 1,
) -> int:
    """Trains ``model`` from ``start_step`` to ``train_steps``; returns the final step.

    Args:
      model: a built Keras model with its optimizer (made under ``strategy.scope()``).
      dataset: endless (features, label) batches of the global batch size.
      strategy: the strategy the model was built under.
      loss: the spec's Keras loss (object or name).
      start_step: the optimizer's step counter now (restored from a checkpoint, else 0).
      train_steps: the step to stop at.
      interval: steps between checkpoints (``save(step)`` after each, and at the end).
      save: saves a checkpoint numbered by the step.
      log_dir: where TensorBoard's ``train`` folder goes (None: no logs, a non-chief).
      metrics: Keras metrics (made under the scope) updated on the training batches.
      steps_per_call: steps run by one call into TensorFlow (a divisor of ``interval`` and
        of the last, shorter interval: see :func:`trainer.spec.steps_per_execution`), as
        Keras's ``steps_per_execution``: the Python round trip and the loss read back
        to the host once per call, not once per step.
    """
    import tensorflow as tf

    optimizer = model.optimizer
    compute_loss = _loss_fn(model, loss, strategy)

    def replica_step(features, labels):
        with tf.GradientTape() as tape:
            predictions = model(features, training=True)
            value = compute_loss(labels, predictions)
            scaled = optimizer.scale_loss(value) if hasattr(optimizer, "scale_loss") else value
        gradients = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        for metric in metrics:
            metric.update_state(labels, predictions)
        return value

    @tf.function
    def steps(iterator, count):
        # The summed loss of `count` steps; a graph loop, so one call runs them all.
        total = tf.constant(0.0)
        for _ in tf.range(count):
            per_replica = strategy.run(replica_step, args=next(iterator))
            value = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
            total += tf.cast(value, tf.float32)
        return total

    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    calls = tf.constant(steps_per_call)
    writer = tf.summary.create_file_writer(os.path.join(log_dir, "train")) if log_dir else None
    current = start_step
    while current < train_steps:
        stop = min(train_steps, (current // interval + 1) * interval)
        for metric in metrics:
            metric.reset_state()
        done, total = current, 0.0
        while done < stop:
            count = calls if stop - done >= steps_per_call else tf.constant(stop - done)
            total += float(steps(iterator, count))
            done += int(count)
        values = {"loss": total / (stop - current)}
        values.update({m.name: float(m.result()) for m in metrics})
        current = stop
        # Logged (and flushed) before the checkpoint: a worker lost right after the
        # checkpoint gets the attempt's processes stopped, and the chief's interval would
        # be trained, saved and never logged; lost between the two, the next attempt
        # trains the interval again and logs it again, which is what happened. Step = the
        # interval's index, as Keras's TensorBoard logs fit's epochs.
        _log(writer, values, (current + interval - 1) // interval - 1)
        save(current)
    if writer is not None:
        writer.close()
    return int(optimizer.iterations.numpy())


def evaluate_loop(
    model: keras.Model,
    dataset: tf.data.Dataset,
    strategy: tf.distribute.Strategy,
    *,
    loss: Any,
    steps: int,
    metrics: Sequence[Any] = (),
) -> dict[str, float]:
    """``loss`` and each metric over ``steps`` global batches of ``dataset``, every
    replica's share counted (the metrics' state is summed across replicas)."""
    import tensorflow as tf

    compute_loss = _loss_fn(model, loss, strategy)

    def replica_step(features, labels):
        predictions = model(features, training=False)
        for metric in metrics:
            metric.update_state(labels, predictions)
        return compute_loss(labels, predictions)

    @tf.function
    def step(iterator):
        per_replica = strategy.run(replica_step, args=next(iterator))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    for metric in metrics:
        metric.reset_state()
    iterator = iter(strategy.experimental_distribute_dataset(dataset))
    total = sum(float(step(iterator)) for _ in range(steps))
    results = {"loss": total / max(1, steps)}
    results.update({m.name: float(m.result()) for m in metrics})
    return results


def lose_worker_hook(step: int, chief_checkpoints: str) -> None:
    """The test hook of :data:`LOSE_WORKER_ENV`, called by a worker after it saved the
    checkpoint of ``step``: exits this process when the hook names its rank and attempt."""
    import json
    import time

    wanted = os.environ.get(LOSE_WORKER_ENV)
    if not wanted or step <= 0:
        return
    rank = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("index")
    if f"{rank}:{os.environ.get(ATTEMPT_ENV)}" not in wanted.split(","):
        return
    import tensorflow as tf

    # The chief's checkpoint of this step must be whole: the next attempt restores it.
    while not (tf.train.latest_checkpoint(chief_checkpoints) or "").endswith(f"-{step}"):
        time.sleep(_POLL_S)
    os._exit(17)
