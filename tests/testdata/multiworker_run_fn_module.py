"""A TFX-style ``run_fn`` (the shape of TFX 1.16's ``penguin_utils_keras.run_fn``) that trains
on several workers: the model is built with Keras 2 (``tf_keras``, as TFX 1.16 trains) under
``fn_args.strategy``, the two lines a TFX module changes for ``--train_workers``.

It reads the bundled penguin module's transformed features (the tests train it on the run
directory that module's ``preprocessing_fn`` made), resumes through Keras 2's
``BackupAndRestore`` in ``fn_args.model_run_dir`` (shared by the workers: Keras 2 writes a
non-chief worker's backups to a temporary folder of its own and removes it), and saves the
model as TFX modules do (``model.tft_layer`` and a ``serving_default`` signature over raw
tf.Examples, ``model.save(..., save_format="tf")``).

Test hooks (read from the environment, not product settings): ``MWFN_LOSE_RANK`` ``"<rank>"``
ends that rank's process (``os._exit(17)``) after its first epoch in attempt 0, as a lost
worker would; ``MWFN_EPOCH_LOG`` a file where the chief appends ``<attempt> <epoch>`` at the
end of each epoch it trained.
"""

import os
import time

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras as keras
from tfx_bsl.public import tfxio

from trainer import FnArgs

LABEL_KEY = "species"
FEATURE_KEYS = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
TRAIN_BATCH_SIZE = 20
EVAL_BATCH_SIZE = 10
# Seeded: the initial weights (broadcast from the chief under the multi-worker strategy) and
# the data order are those of every run, so 1 and 2 workers differ by the data each replica
# sees, not by chance.
SEED = 0
EPOCHS = 10


def transformed_name(key):
    return key + "_xf"


def _make_keras_model():
    inputs = [keras.layers.Input(shape=(1,), name=transformed_name(f)) for f in FEATURE_KEYS]
    d = keras.layers.concatenate(inputs)
    for _ in range(2):
        d = keras.layers.Dense(8, activation="relu")(d)
    outputs = keras.layers.Dense(3)(d)
    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


def _input_fn(file_pattern, data_accessor, tf_transform_output, batch_size):
    return data_accessor.tf_dataset_factory(
        file_pattern,
        tfxio.TensorFlowDatasetOptions(
            batch_size=batch_size, label_key=transformed_name(LABEL_KEY)
        ),
        tf_transform_output.transformed_metadata.schema,
    )


def _make_serving_signatures(model, tf_transform_output):
    model.tft_layer = tf_transform_output.transform_features_layer()

    @tf.function(input_signature=[tf.TensorSpec(shape=[None], dtype=tf.string, name="examples")])
    def serve_tf_examples_fn(serialized_tf_example):
        raw_feature_spec = tf_transform_output.raw_feature_spec()
        raw_feature_spec.pop(LABEL_KEY)
        raw_features = tf.io.parse_example(serialized_tf_example, raw_feature_spec)
        transformed = model.tft_layer(raw_features)
        logits = model([transformed[transformed_name(f)] for f in FEATURE_KEYS])
        return {"scores": tf.nn.softmax(logits)}

    return {"serving_default": serve_tf_examples_fn}


class _LoseWorker(keras.callbacks.Callback):
    """Ends this process after its first epoch, once the chief's backup of it is complete
    (test hook: a lost worker at a known point, no timing involved)."""

    def __init__(self, backup_dir):
        super().__init__()
        self.backup_dir = backup_dir

    def on_epoch_end(self, epoch, logs=None):
        # Keras 2 keeps the chief's backups in <backup_dir>/chief.
        while tf.train.latest_checkpoint(os.path.join(self.backup_dir, "chief")) is None:
            time.sleep(0.1)
        os._exit(17)


class _EpochLog(keras.callbacks.Callback):
    """Appends ``<attempt> <epoch>`` to a file at the end of each epoch (test hook)."""

    def __init__(self, path, attempt):
        super().__init__()
        self.path, self.attempt = path, attempt

    def on_epoch_end(self, epoch, logs=None):
        with open(self.path, "a") as f:
            f.write(f"{self.attempt} {epoch}\n")


def run_fn(fn_args: FnArgs):
    keras.utils.set_random_seed(SEED)
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    train_dataset = _input_fn(
        fn_args.train_files, fn_args.data_accessor, tf_transform_output, TRAIN_BATCH_SIZE
    )
    eval_dataset = _input_fn(
        fn_args.eval_files, fn_args.data_accessor, tf_transform_output, EVAL_BATCH_SIZE
    )
    # TFX's module: mirrored_strategy = tf.distribute.MirroredStrategy(); the two lines:
    strategy = fn_args.strategy
    with strategy.scope():
        model = _make_keras_model()

    backup_dir = os.path.join(fn_args.model_run_dir, "backup")
    callbacks = [
        keras.callbacks.BackupAndRestore(backup_dir),
        keras.callbacks.TensorBoard(log_dir=fn_args.model_run_dir, update_freq="epoch"),
    ]
    task = tf.distribute.cluster_resolver.TFConfigClusterResolver().task_id or 0
    attempt = os.environ.get("BEAM_PIPELINE_TRAIN_ATTEMPT")
    if os.environ.get("MWFN_EPOCH_LOG") and task == 0:
        # First: its line is written before the backup that a lost rank waits for.
        callbacks.insert(0, _EpochLog(os.environ["MWFN_EPOCH_LOG"], attempt))
    if os.environ.get("MWFN_LOSE_RANK") == str(task) and attempt == "0":
        callbacks.append(_LoseWorker(backup_dir))
    model.fit(
        train_dataset,
        steps_per_epoch=fn_args.train_steps // EPOCHS,
        epochs=EPOCHS,
        validation_data=eval_dataset,
        validation_steps=fn_args.eval_steps,
        validation_freq=EPOCHS,
        callbacks=callbacks,
        verbose=0,
    )
    signatures = _make_serving_signatures(model, tf_transform_output)
    model.save(fn_args.serving_model_dir, save_format="tf", signatures=signatures)
