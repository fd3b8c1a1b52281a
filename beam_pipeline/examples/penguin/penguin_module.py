"""The bundled penguin module file, written in TFX's module-file style.

It works on the raw Palmer penguins table (``penguins.csv``, with its missing values):
``preprocessing_fn`` imputes missing measurements with their mean, z-scores them, and maps
the string columns through vocabularies. A TFX module file ports to beam-pipeline by
changing only its import lines.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

LABEL_KEY = "species"
NUMERIC_FEATURES = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
CATEGORICAL_FEATURES = ["island", "sex"]


def transformed_name(key: str) -> str:
    return key + "_xf"


def _dense(x, default):
    """A [batch] dense tensor from a dense [batch, 1] or a sparse (optional) feature."""
    if isinstance(x, tf.sparse.SparseTensor):
        x = tf.sparse.to_dense(
            tf.SparseTensor(x.indices, x.values, [x.dense_shape[0], 1]), default_value=default
        )
    return tf.squeeze(x, axis=1)


def _to_float(x):
    if isinstance(x, tf.sparse.SparseTensor):
        return tf.SparseTensor(x.indices, tf.cast(x.values, tf.float32), x.dense_shape)
    return tf.cast(x, tf.float32)


def preprocessing_fn(inputs):
    """tf.Transform: z-scored measurements, vocabulary-encoded island/sex/species."""
    outputs = {}
    for key in NUMERIC_FEATURES:
        x = _to_float(inputs[key])
        # Impute a missing measurement with the feature's mean over present values.
        mean = tft.mean(x)
        outputs[transformed_name(key)] = tft.scale_to_z_score(_dense(x, mean))
    for key in CATEGORICAL_FEATURES:
        outputs[transformed_name(key)] = tft.compute_and_apply_vocabulary(
            _dense(inputs[key], b"unknown"), num_oov_buckets=1, vocab_filename=key
        )
    outputs[transformed_name(LABEL_KEY)] = tft.compute_and_apply_vocabulary(
        _dense(inputs[LABEL_KEY], b""), vocab_filename=LABEL_KEY
    )
    return outputs
