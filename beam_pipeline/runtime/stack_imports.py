"""The ML stack a fork server's processes need, imported once: by the fork server's preload
(:mod:`beam_pipeline.runtime.pool_zygote`), or by a launcher that forks its fork server
from itself (:mod:`beam_pipeline.core.forked`) and so pays these imports once, not twice.

Only imports: no TensorFlow op, no thread (a process forked after them must not inherit
half-started runtimes).
"""

import importlib
import os

from beam_pipeline.core.forked import WORKER_MODULES_ENV


def import_stack() -> None:
    """TensorFlow, Keras, keras-tuner, tf.Transform, tfx-bsl, Beam's SDK harness and the
    stages' Beam steps (their ``worker_modules``, listed in the environment by the
    launcher before the server starts). Raises what an import raises."""
    from apache_beam.runners.worker import sdk_worker  # noqa: F401
    from apache_beam.runners.worker.worker_pool_main import (  # noqa: F401
        BeamFnExternalWorkerPoolServicer,
    )

    from trainer.process import prewarm

    prewarm()  # first, in the order a pool process always imported them (Keras before TFT)
    # The stages' Beam steps, which DoFns unpickle.
    for name in filter(None, os.environ.get(WORKER_MODULES_ENV, "").split(",")):
        importlib.import_module(name)
