"""Mixed precision (``--mixed_precision``): float16 compute on GPUs, bfloat16 on CPUs.

Keras keeps variables in float32 and computes in the policy's 16-bit type; on a GPU that
uses its tensor cores (float16, with the loss scaling Keras adds at ``compile``), on a CPU
bfloat16 (no loss scaling needed: it has float32's range). The runner builds a TrainSpec's
model under the policy (:func:`policy_scope`) and runs a ``run_fn`` under it (the module
need not apply it; ``fn_args.mixed_precision`` names it, a TFX module's
``fn_args.custom_config["mixed_precision"]``). The exported signature casts 16-bit outputs
back to float32, so a server sees the same float32 model either way.

Example::

    policy = precision_policy(True)        # "mixed_float16" on a GPU worker
    with policy_scope(policy):
        model = spec.model(hp)             # its layers compute in float16
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Optional

__all__ = ["CUSTOM_CONFIG_KEY", "policy_scope", "precision_policy"]

# Where a TFX module (whose FnArgs has no such field) finds the policy's name.
CUSTOM_CONFIG_KEY = "mixed_precision"


def precision_policy(enabled: bool) -> Optional[str]:
    """The Keras policy for this worker: ``mixed_float16`` where TensorFlow has a GPU,
    ``mixed_bfloat16`` on CPU; None when mixed precision is off."""
    if not enabled:
        return None
    import tensorflow as tf

    return "mixed_float16" if tf.config.list_logical_devices("GPU") else "mixed_bfloat16"


@contextlib.contextmanager
def policy_scope(policy: Optional[str]) -> Iterator[None]:
    """Keras's global dtype policy is ``policy`` inside (layers built there keep it);
    the previous one is restored after. Nothing changes for None."""
    if policy is None:
        yield
        return
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
