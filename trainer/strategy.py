"""The distribution strategy the trainer hands to a module: every local GPU, or plain CPU.

On a worker with GPUs: GPU memory growth is turned on (so TensorFlow does not grab all
device memory up front) and a ``MirroredStrategy`` spans every local GPU. Without GPUs:
the default (single-device) strategy. For tests, ``logical_cpus=N`` splits the CPU into N
logical devices and mirrors over them, and ``logical_gpus=N`` splits the first GPU into N
(multi-GPU code paths on a one-GPU machine); this must run before TensorFlow initializes
its devices, so do it first thing in a fresh process.

Example::

    strategy = choose_strategy()
    with strategy.scope():
        model = make_model()
    print(describe(strategy))   # StrategyInfo(num_replicas=2, devices=(".../GPU:0", ...))
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = ["StrategyInfo", "configure_devices", "choose_strategy", "describe"]

_LOG = logging.getLogger(__name__)
# Each logical GPU's share when one GPU is split (a logical GPU needs a memory limit).
LOGICAL_GPU_MEMORY_MB = 2048


@dataclasses.dataclass(frozen=True)
class StrategyInfo:
    """What a strategy runs on.

    Attributes:
      name: the strategy's class name.
      num_replicas: replicas kept in sync (one per device).
      devices: the device names, one per replica.
    """

    name: str
    num_replicas: int
    devices: tuple[str, ...]


def configure_devices(logical_cpus: int = 0, logical_gpus: int = 0) -> None:
    """Turns GPU memory growth on and, when asked, splits the CPU or a GPU into logical devices.

    Args:
      logical_cpus: when above 1 and there is no GPU, the number of logical CPU devices.
      logical_gpus: when above 1, the first GPU becomes this many logical GPUs of
        :data:`LOGICAL_GPU_MEMORY_MB` each (the others are hidden).

    Raises:
      RuntimeError: a split was asked for after TensorFlow initialized its devices with
        another count (configure them first thing in a fresh process), or ``logical_gpus``
        on a machine without a GPU.
    """
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if logical_gpus > 1:
        _split_first_gpu(tf, gpus, logical_gpus)
        return
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:
            # Devices already initialized in this process (an earlier stage used them).
            _LOG.info("GPU %s already initialized; memory growth left as it was.", gpu.name)
    if logical_cpus > 1 and not gpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(logical_cpus)]
            )
        except RuntimeError:
            have = len(tf.config.list_logical_devices("CPU"))
            if have != logical_cpus:
                raise RuntimeError(
                    f"Cannot split the CPU into {logical_cpus} logical devices: TensorFlow "
                    f"already initialized {have}; configure them first in a fresh process."
                ) from None


def _split_first_gpu(tf, gpus: list, count: int) -> None:
    if not gpus:
        raise RuntimeError(f"Cannot split a GPU into {count} logical GPUs: TensorFlow sees none.")
    try:
        tf.config.set_visible_devices(gpus[0], "GPU")
        tf.config.set_logical_device_configuration(
            gpus[0],
            [tf.config.LogicalDeviceConfiguration(LOGICAL_GPU_MEMORY_MB) for _ in range(count)],
        )
    except RuntimeError:
        have = len(tf.config.list_logical_devices("GPU"))
        if have != count:
            raise RuntimeError(
                f"Cannot split the GPU into {count} logical GPUs: TensorFlow already "
                f"initialized {have}; configure them first in a fresh process."
            ) from None


def choose_strategy(logical_cpus: int = 0, logical_gpus: int = 0) -> tf.distribute.Strategy:
    """MirroredStrategy over all local GPUs; the default strategy on a CPU-only host.

    Args:
      logical_cpus: for tests: with no GPU, mirror over this many logical CPU devices.
      logical_gpus: for tests: split the first GPU into this many and mirror over them.

    Returns:
      a ``tf.distribute.Strategy``.
    """
    import tensorflow as tf

    configure_devices(logical_cpus, logical_gpus)
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    if gpus:
        if logical_gpus > 1:
            # Logical GPUs of one physical GPU: NCCL (MirroredStrategy's default all-reduce)
            # needs distinct physical devices, so the replicas reduce by copies on the GPU.
            return tf.distribute.MirroredStrategy(
                devices=gpus, cross_device_ops=tf.distribute.HierarchicalCopyAllReduce()
            )
        return tf.distribute.MirroredStrategy(devices=gpus)
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    if logical_cpus > 1:
        # NCCL is GPU-only; on CPU devices reduce through one device.
        return tf.distribute.MirroredStrategy(
            devices=cpus[:logical_cpus], cross_device_ops=tf.distribute.ReductionToOneDevice()
        )
    return tf.distribute.get_strategy()


def describe(strategy: tf.distribute.Strategy) -> StrategyInfo:
    """The replica count and device names of ``strategy``."""
    import tensorflow as tf

    try:
        devices = tuple(strategy.extended.worker_devices)
    except (AttributeError, RuntimeError):  # the default strategy does not list them
        gpus = tf.config.list_logical_devices("GPU")
        devices = ((gpus or tf.config.list_logical_devices("CPU"))[0].name,)
    name = type(strategy).__name__.lstrip("_")
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        name = "MultiWorkerMirroredStrategy"  # TF's class is CollectiveAllReduceStrategy
    return StrategyInfo(
        name=name,
        num_replicas=int(strategy.num_replicas_in_sync),
        devices=devices,
    )
