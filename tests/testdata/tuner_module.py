"""A module file for the tuner tests: the penguin model, with its tuner chosen by custom_config.

``fn_args.custom_config`` (the run's ``--custom_config``) picks the search:

- ``tuner``: ``random`` (default), ``grid``, ``bayesian`` or ``hyperband``;
- ``seed`` / ``max_trials``: the oracle's;
- ``fail_on``: ``{"num_layers": 3}`` makes building a model with that value raise (the
  tuner's own first build, with the default values, must not hit it);
- ``fail_all``: every trial's training raises;
- ``exit_once``: a file path; the one trial that creates it (exclusively) kills its own
  process as training starts (a lost worker);
- ``slow_once``: ``{"marker": path, "seconds": s}``; the first trial whose process finds
  the marker missing creates it and sleeps ``s`` seconds as training starts (a slow trial);
  with ``"until_started": n`` it instead waits until ``n`` other trials have started
  training (each leaves a ``<marker>.started.*`` file), ``s`` seconds at most, so a test of
  what runs meanwhile does not depend on how fast a loaded machine starts them;
- ``print_kb``: each trial prints that many KB to standard output, and Keras its progress
  bars (a chatty module must not block its worker).

``run_fn`` is the bundled penguin ``run_fn`` in short; it also writes the hyperparameters
it received to ``<model_run_dir>/received_hyperparameters.json``.
"""

from __future__ import annotations

import json
import os
import time

import keras
import keras_tuner
import tensorflow as tf
import tensorflow_transform as tft
from tfx_bsl.public import tfxio

from trainer import FnArgs, TunerFnResult, export_serving_model

FEATURE_KEYS = ["bill_length_mm_xf", "bill_depth_mm_xf", "flipper_length_mm_xf", "body_mass_g_xf"]
CATEGORICAL_KEYS = ["island_xf", "sex_xf"]
LABEL_KEY = "species_xf"


def _hyperparameters(grid: bool = False) -> keras_tuner.HyperParameters:
    hp = keras_tuner.HyperParameters()
    if grid:
        hp.Fixed("learning_rate", 1e-2)
    else:
        hp.Choice("learning_rate", [1e-2, 1e-3], default=1e-2)
    hp.Int("num_layers", 1, 3, default=2)
    return hp


class _RaiseInTraining(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        raise RuntimeError("training diverged")


class _Print(keras.callbacks.Callback):
    def __init__(self, kilobytes: int):
        super().__init__()
        self.kilobytes = kilobytes

    def on_train_begin(self, logs=None):
        for _ in range(self.kilobytes):
            print("x" * 1023, flush=True)


class _ExitOnce(keras.callbacks.Callback):
    def __init__(self, marker: str):
        super().__init__()
        self.marker = marker

    def on_train_begin(self, logs=None):
        # Exclusive create: one trial of the search wins, however many start at once (a
        # check for the file, then its creation, once let both of a search job's first two
        # trials exit: two lost workers where the test expects one; a fresh-clone CI run).
        try:
            open(self.marker, "x").close()
        except FileExistsError:
            return
        os._exit(3)  # the worker process dies mid-trial


class _SlowOnce(keras.callbacks.Callback):
    def __init__(self, marker: str, seconds: float, until_started: int = 0):
        super().__init__()
        self.marker, self.seconds, self.until_started = marker, seconds, until_started

    def _others_started(self) -> int:
        folder, name = os.path.split(self.marker)
        return sum(f.startswith(name + ".started.") for f in os.listdir(folder))

    def on_train_begin(self, logs=None):
        try:
            open(self.marker, "x").close()  # exclusive create: one trial of the search wins
        except FileExistsError:
            open(f"{self.marker}.started.{os.getpid()}.{time.time_ns()}", "x").close()
            return
        deadline = time.monotonic() + self.seconds
        if not self.until_started:
            time.sleep(self.seconds)
            return
        while self._others_started() < self.until_started and time.monotonic() < deadline:
            time.sleep(0.1)


def _build(hp, tf_transform_output, custom_config) -> keras.Model:
    fail_on = custom_config.get("fail_on", {})
    if any(hp.get(k) == v for k, v in fail_on.items()):
        raise ValueError(f"this model cannot be built with {hp.values}")
    inputs = {k: keras.Input(shape=(1,), name=k) for k in FEATURE_KEYS}
    parts = [keras.layers.Concatenate()(list(inputs.values()))]
    for key in CATEGORICAL_KEYS:
        inputs[key] = keras.Input(shape=(1,), name=key, dtype="int64")
        buckets = tf_transform_output.num_buckets_for_transformed_feature(key)
        parts.append(keras.layers.CategoryEncoding(buckets, output_mode="one_hot")(inputs[key]))
    d = keras.layers.Concatenate()(parts)
    for _ in range(int(hp.get("num_layers"))):
        d = keras.layers.Dense(8, activation="relu")(d)
    model = keras.Model(inputs=inputs, outputs=keras.layers.Dense(3)(d))
    model.compile(
        optimizer=keras.optimizers.Adam(hp.get("learning_rate")),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
        # Eager steps: a trial here is 5 steps, for which tracing Keras's train and test
        # functions costs more CPU than it saves.
        run_eagerly=True,
    )
    return model


def _dataset(files, data_accessor, tf_transform_output, batch_size):
    return data_accessor.tf_dataset_factory(
        files,
        tfxio.TensorFlowDatasetOptions(batch_size=batch_size, label_key=LABEL_KEY),
        tf_transform_output.transformed_metadata.schema,
    )


def tuner_fn(fn_args: FnArgs) -> TunerFnResult:
    custom = fn_args.custom_config
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
    kind = custom.get("tuner", "random")
    common = dict(
        hypermodel=lambda hp: _build(hp, tf_transform_output, custom),
        objective=keras_tuner.Objective("val_sparse_categorical_accuracy", "max"),
        hyperparameters=_hyperparameters(grid=kind == "grid"),
        allow_new_entries=False,
        directory=fn_args.working_dir,
        project_name="test_tuning",
        seed=custom.get("seed", 1),
    )
    if kind == "hyperband":
        tuner = keras_tuner.Hyperband(max_epochs=2, factor=2, **common)
    elif kind == "bayesian":
        tuner = keras_tuner.BayesianOptimization(
            max_trials=custom.get("max_trials", 3), num_initial_points=2, **common
        )
    elif kind == "grid":
        tuner = keras_tuner.GridSearch(max_trials=custom.get("max_trials", 10), **common)
    else:
        tuner = keras_tuner.RandomSearch(max_trials=custom.get("max_trials", 4), **common)
    callbacks = []
    if custom.get("slow_once"):  # first: with fail_all, the slow trial fails after its wait
        callbacks.append(_SlowOnce(**custom["slow_once"]))
    if custom.get("fail_all"):
        callbacks.append(_RaiseInTraining())
    if custom.get("exit_once"):
        callbacks.append(_ExitOnce(custom["exit_once"]))
    if custom.get("print_kb"):
        callbacks.append(_Print(custom["print_kb"]))
    return TunerFnResult(
        tuner=tuner,
        fit_kwargs={
            "callbacks": callbacks,
            "x": _dataset(fn_args.train_files, fn_args.data_accessor, tf_transform_output, 20),
            "validation_data": _dataset(
                fn_args.eval_files, fn_args.data_accessor, tf_transform_output, 10
            ),
            "steps_per_epoch": fn_args.train_steps,
            "validation_steps": fn_args.eval_steps,
            "verbose": 1 if custom.get("print_kb") else 0,
        },
    )


def run_fn(fn_args: FnArgs) -> None:
    with tf.io.gfile.GFile(
        os.path.join(fn_args.model_run_dir, "received_hyperparameters.json"), "w"
    ) as f:
        f.write(json.dumps(fn_args.hyperparameters))
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
    hp = keras_tuner.HyperParameters.from_config(fn_args.hyperparameters)
    model = _build(hp, tf_transform_output, {})
    model.fit(
        _dataset(fn_args.train_files, fn_args.data_accessor, tf_transform_output, 20),
        steps_per_epoch=fn_args.train_steps,
        verbose=0,
    )
    export_serving_model(
        model,
        tf_transform_output,
        fn_args.serving_model_dir,
        raw_label_keys=["species"],
        outputs=lambda logits: {"scores": tf.nn.softmax(logits)},
        schema_path=fn_args.schema_path,
    )
