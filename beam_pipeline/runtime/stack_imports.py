"""The ML stack a fork server's processes need, imported once: by the fork server's preload
(:mod:`beam_pipeline.runtime.pool_zygote`), or by a launcher that forks its fork server
from itself (:mod:`beam_pipeline.core.forked`) and so pays these imports once, not twice.

Only imports: no TensorFlow op, no thread (a process forked after them must not inherit
half-started runtimes).
"""

import gc
import importlib
import os

from beam_pipeline.core.forked import WORKER_MODULES_ENV


def import_stack() -> None:
    """TensorFlow, Keras, keras-tuner, tf.Transform, tfx-bsl, Beam's SDK harness and the
    stages' Beam steps (their ``worker_modules``, listed in the environment by the
    launcher before the server starts). Raises what an import raises.

    The cyclic collector is off while they run, and their objects go to its permanent
    generation after (``gc.freeze``), which collections skip; a process forked after
    inherits both. Imports make few cycles, but each full collection walks every object
    made so far: the launcher ran several during these imports, each longer than the
    last, and a walk of all of them at every later one; keras-tuner runs two before
    every trial (``Tuner._try_build``: ``clear_session()`` and ``gc.collect()``). Frozen
    objects are also never written by the collector, so forks keep sharing their pages.
    (The standard recipe for pre-fork servers: Python's gc.freeze documentation.) The
    collector is left on or off as it was found.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        _import_stack()
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _import_stack() -> None:
    from apache_beam.runners.worker import sdk_worker  # noqa: F401
    from apache_beam.runners.worker.worker_pool_main import (  # noqa: F401
        BeamFnExternalWorkerPoolServicer,
    )

    from trainer.process import prewarm

    prewarm()  # first, in the order a pool process always imported them (Keras before TFT)
    # The stages' Beam steps, which DoFns unpickle.
    for name in filter(None, os.environ.get(WORKER_MODULES_ENV, "").split(",")):
        importlib.import_module(name)
