"""One Keras for every module file: ``tf.keras`` is Keras 3, whatever was imported first.

keras-tuner 1.4.8 accepts Keras 3 models only, and a module file may build its model with
``import keras``, ``tf.keras`` or ``from tensorflow import keras`` (TFX's examples use the
last two). Which Keras ``tf.keras`` is depends on the process: TensorFlow resolves it
lazily, on first use, from ``TF_USE_LEGACY_KERAS``, and importing ``tensorflow_transform``
sets ``TF_USE_LEGACY_KERAS=1`` and resolves it at once, to tf_keras (Keras 2). So in a
process where tf.Transform came first (every worker that ran a Transform job, the launcher
after the data stages), ``tf.keras`` models were tf_keras models that keras-tuner refused,
while the same module built Keras 3 models elsewhere.

:func:`use_keras_3` points ``tf.keras`` (the attribute, and the ``tensorflow.keras``
module that ``from tensorflow.keras import layers`` imports) at Keras 3's TensorFlow API,
as TensorFlow does when ``TF_USE_LEGACY_KERAS`` is unset. :func:`beam_pipeline.core.user_module.
load_module` calls it before it executes a module file, and every process that runs a
module's code (the launcher, the tuner's pool workers, DirectRunner, portable and Dataflow
workers) loads the module with it, so the order of imports no longer matters.

``TF_USE_LEGACY_KERAS`` itself is left as tf.Transform sets it: tf.Transform builds its
``transform_features_layer()`` with the tf_keras package either way (it checks that
``tf.keras`` is Keras 3 and imports tf_keras then), and that layer still attaches to a
Keras 3 model as ``model.tft_layer`` and is saved with it by ``tf.saved_model.save``, as
TFX's module files do.

Example::

    use_keras_3()
    import tensorflow as tf
    assert isinstance(tf.keras.layers.Dense(1), keras.layers.Layer)
"""

from __future__ import annotations

import importlib
import sys

__all__ = ["use_keras_3"]

_KERAS_3_TF_API = "keras._tf_keras.keras"  # what TensorFlow's lazy loader picks for Keras 3
_TF_KERAS = "tensorflow.keras"


def use_keras_3() -> None:
    """Makes ``tf.keras`` and ``tensorflow.keras`` Keras 3 in this process (idempotent).

    Imports TensorFlow (which installs its lazy ``tf.keras``) and replaces that attribute
    with Keras 3's TensorFlow API, resolved or not. ``tensorflow.keras.*`` submodules
    already imported (possibly from tf_keras) are dropped from ``sys.modules``, so the
    next ``from tensorflow.keras.layers import ...`` imports Keras 3's.
    """
    import tensorflow as tf

    keras_3 = importlib.import_module(_KERAS_3_TF_API)
    if sys.modules.get(_TF_KERAS) is keras_3 and tf.__dict__.get("keras") is keras_3:
        return
    for name in [m for m in sys.modules if m.startswith(_TF_KERAS + ".")]:
        del sys.modules[name]
    sys.modules[_TF_KERAS] = keras_3
    tf.keras = keras_3
