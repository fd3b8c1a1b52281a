"""A compute-bound module for benchmarks/bench_trainer.py: 4 Dense layers of 2048, batch 1024.

``preprocessing_fn`` z-scores ``N_FEATURES`` float columns (``f0`` ... ``f31``) and passes
the 0/1 ``label`` through; ``ComputeSpec`` trains an MLP on them. Each step is about
78 GFLOP (forward and backward over 4 x 2048^2 weights at batch 1024), so on an H100 the
step should take well under a millisecond when the input keeps up: the point of the
benchmark is whether it does.
"""

import keras
import tensorflow as tf
import tensorflow_transform as tft

from trainer import TrainSpec

N_FEATURES = 32
FEATURES = [f"f{i}" for i in range(N_FEATURES)]
LABEL = "label"
WIDTH = 2048
DEPTH = 4


def preprocessing_fn(inputs):
    out = {f"{k}_xf": tft.scale_to_z_score(tf.cast(inputs[k], tf.float32)) for k in FEATURES}
    out[f"{LABEL}_xf"] = tf.cast(inputs[LABEL], tf.int64)
    return out


class ComputeSpec(TrainSpec):
    label_key = f"{LABEL}_xf"
    raw_label_keys = (LABEL,)
    batch_size = 1024
    eval_batch_size = 1024
    checkpoint_every = 1000

    def model(self, hp):
        inputs = {f"{k}_xf": keras.Input(shape=(1,), name=f"{k}_xf") for k in FEATURES}
        x = keras.layers.Concatenate()(list(inputs.values()))
        for _ in range(DEPTH):
            x = keras.layers.Dense(WIDTH, activation="relu")(x)
        # float32 logits under mixed precision too (Keras's advice for the last layer).
        outputs = keras.layers.Dense(2, dtype="float32")(x)
        return keras.Model(inputs, outputs)

    def loss(self, hp):
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def optimizer(self, hp):
        return keras.optimizers.SGD(1e-3)
