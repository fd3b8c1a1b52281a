"""A module file with no tuner_fn: a TrainSpec tuned over a search space from the config.

The spec's ``model`` writes the hyperparameter values it is built with to
``<model_run_dir>/spec_hyperparameters.json`` when training (not while tuning), so a test
can see what the trainer received.
"""

from __future__ import annotations

import json
import os

import keras
import keras_tuner
import tensorflow as tf

from trainer import TrainSpec

FEATURE_KEYS = ["bill_length_mm_xf", "bill_depth_mm_xf", "flipper_length_mm_xf", "body_mass_g_xf"]


class PenguinSearchSpec(TrainSpec):
    label_key = "species_xf"
    raw_label_keys = ("species",)
    batch_size = 20
    eval_batch_size = 10

    def default_hyperparameters(self) -> keras_tuner.HyperParameters:
        hp = keras_tuner.HyperParameters()
        hp.Choice("learning_rate", [1e-2, 1e-3], default=1e-2)
        hp.Int("num_layers", 1, 2, default=1)
        hp.Choice("units", [4, 8], default=8)
        return hp

    def model(self, hp: keras_tuner.HyperParameters) -> keras.Model:
        if self.fn_args.model_run_dir:
            path = os.path.join(self.fn_args.model_run_dir, "spec_hyperparameters.json")
            with tf.io.gfile.GFile(path, "w") as f:
                f.write(json.dumps(hp.values))
        inputs = {k: keras.Input(shape=(1,), name=k) for k in FEATURE_KEYS}
        d = keras.layers.Concatenate()(list(inputs.values()))
        for _ in range(int(hp.get("num_layers"))):
            d = keras.layers.Dense(int(hp.get("units")), activation="relu")(d)
        return keras.Model(inputs, keras.layers.Dense(3)(d))

    def loss(self, hp: keras_tuner.HyperParameters) -> keras.losses.Loss:
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def metrics(self, hp: keras_tuner.HyperParameters) -> list:
        return [keras.metrics.SparseCategoricalAccuracy()]

    def serving_outputs(self, predictions):
        return {"scores": tf.nn.softmax(predictions)}
