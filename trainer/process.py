"""Setting up a trainer's worker process: its name, TensorFlow's thread pools, warm imports.

Shared by the training job and the tuner's trials (and the local worker pool, which calls
:func:`limit_threads` and :func:`prewarm` first thing in each of its processes).

Example::

    limit_threads(2)       # before TensorFlow runs its first op
    prewarm()              # seconds of imports, paid before the first trial instead of in it
    worker_name()          # "host:1234": what a result records as the process that ran it
"""

from __future__ import annotations

import logging
import os
import socket

__all__ = ["limit_threads", "prewarm", "tf_transform_unconverted", "worker_name"]

_LOG = logging.getLogger(__name__)


def worker_name() -> str:
    """``host:pid`` of this process (what a training or trial result records as its worker)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def limit_threads(threads: int) -> bool:
    """Caps this process's TensorFlow thread pools so parallel trials do not fight for cores.

    Call it before TensorFlow runs its first op (first thing in a worker process): the
    pools cannot be resized after that.

    Args:
      threads: intra-op threads (inter-op get at least 2); 0 or less leaves TF's default.

    Returns:
      True when the pools have that size now.
    """
    if threads <= 0:
        return False
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(max(2, threads))
    except RuntimeError:  # TF already initialized in this process; keep what it has.
        have = tf.config.threading.get_intra_op_parallelism_threads()
        if have != threads:
            _LOG.info("TensorFlow already runs %s intra-op threads; not %d.", have, threads)
        return have == threads
    return True


def prewarm() -> None:
    """Imports what a trial needs (seconds of imports), so a warm worker's first trial is fast."""
    import keras  # noqa: F401
    import keras_tuner  # noqa: F401
    import tensorflow  # noqa: F401
    import tensorflow_transform  # noqa: F401
    from tfx_bsl.public import tfxio  # noqa: F401

    tf_transform_unconverted()  # in the fork server: every fork (a trial, a run_fn) has it


def tf_transform_unconverted() -> None:
    """Leaves tf.Transform's own functions out of AutoGraph's conversion, as AutoGraph
    leaves TensorFlow's and Keras's (its ``CONVERSION_RULES``); idempotent.

    A module's serving signature is a ``tf.function`` traced with AutoGraph on, and TFX's
    modules call tf.Transform's layer in it (``make_serving_signatures``: ``model.tft_layer
    = tf_transform_output.transform_features_layer()``). AutoGraph then transpiles from
    source every function of tf.Transform that the trace calls, its SavedModel loader and
    what that calls, in each process that exports: most of the CPU of TFX's penguin
    module's save. None of it needs converting: tf.Transform's code has no Python
    control flow on tensors, as it also runs in ``tf.compat.v1`` graphs
    (``force_tf_compat_v1``), where there is no AutoGraph. The user's own functions (the
    serving function, a ``preprocessing_fn``) are converted as before. TensorFlow's own
    test helper (``autograph.core.converter_testing``) extends these rules the same way.
    """
    from tensorflow.python.autograph.core import config

    name = "tensorflow_transform"
    if not any(r.matches(name) for r in config.CONVERSION_RULES):
        config.CONVERSION_RULES = (*config.CONVERSION_RULES, config.DoNotConvert(name))
