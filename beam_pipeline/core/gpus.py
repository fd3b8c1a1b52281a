"""GPUs on a shared host: memory growth in every process, and GPUs of their own for trial workers.

TensorFlow maps nearly all of a GPU's memory into the first process that initializes it
(a launcher that touched TensorFlow before a trainer set memory growth would hold the GPU,
leaving its tuner workers almost none). TensorFlow reads
``TF_FORCE_GPU_ALLOW_GROWTH`` when it creates a GPU device, so setting it in the
launcher's environment before TensorFlow is imported turns growth on there and in every
process it starts (they inherit the environment: the fork server and the local
pool's workers, Beam's SDK workers, the InfraValidator's sandbox), whatever the module file does.
A value the user set is kept (``false`` to preallocate on purpose).

On a host with several GPUs, ``--gpus_per_trial=N`` hands each tuner pool worker its own
``N`` devices through ``CUDA_VISIBLE_DEVICES`` (set in the worker before CUDA starts); on
one GPU the trials share it, each growing its own share.

Example::

    gpu_environment(os.environ)               # first thing, before TensorFlow is imported
    gpus = host_gpus()                        # ("0", "1", "2", "3"), CUDA not initialized
    worker_gpus(1, 2, gpus)                   # "2,3": pool worker 1's CUDA_VISIBLE_DEVICES
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Optional

from beam_pipeline.core.errors import PipelineError

__all__ = [
    "ALLOW_GROWTH",
    "VISIBLE_DEVICES",
    "check_gpus_per_trial",
    "gpu_environment",
    "hide_gpus",
    "host_gpus",
    "worker_gpus",
]

ALLOW_GROWTH = "TF_FORCE_GPU_ALLOW_GROWTH"
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
# One folder per GPU the NVIDIA driver knows (Linux): counting them starts no CUDA.
_DRIVER_GPUS = "/proc/driver/nvidia/gpus"

_LOG = logging.getLogger(__name__)


def gpu_environment(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Turns GPU memory growth on in ``env`` (``os.environ`` before TensorFlow is imported,
    or a child's environment) unless the user set ``TF_FORCE_GPU_ALLOW_GROWTH``."""
    env.setdefault(ALLOW_GROWTH, "true")
    return env


def host_gpus(env: Optional[Mapping[str, str]] = None) -> tuple[str, ...]:
    """The GPUs this process may hand to its workers, without initializing CUDA.

    ``CUDA_VISIBLE_DEVICES`` when it is set (its entries, in order: the devices the user
    gave this run), else ``0 .. n-1`` for the n GPUs the NVIDIA driver lists, else none.
    """
    env = os.environ if env is None else env
    visible = env.get(VISIBLE_DEVICES)
    if visible is not None:
        return tuple(d.strip() for d in visible.split(",") if d.strip())
    try:
        count = len(os.listdir(_DRIVER_GPUS))
    except OSError:  # no driver folder (some containers): ask the driver's own tool
        count = _nvidia_smi_count()
    return tuple(str(i) for i in range(count))


def _nvidia_smi_count() -> int:
    """The GPUs ``nvidia-smi -L`` lists (one ``GPU i: ...`` line each); 0 without it."""
    import shutil
    import subprocess

    tool = shutil.which("nvidia-smi")
    if tool is None:
        return 0
    try:
        done = subprocess.run([tool, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in done.stdout.splitlines())


def _why_none() -> str:
    if os.environ.get(VISIBLE_DEVICES) is not None:
        return f"{VISIBLE_DEVICES} is empty"
    return "the NVIDIA driver lists no GPU"


def check_gpus_per_trial(gpus_per_trial: int, workers: int, gpus: Sequence[str]) -> None:
    """Refuses a ``--gpus_per_trial`` that this host's GPUs cannot give every worker.

    Raises:
      PipelineError: no GPU at all (the trials would train on CPUs, silently), or several
        GPUs but fewer than ``workers * gpus_per_trial``.
    """
    if gpus_per_trial >= 1 and not gpus:
        raise PipelineError(
            f"--gpus_per_trial={gpus_per_trial} asks for GPUs for each trial, but the trials "
            f"run on this host, which has none ({_why_none()}); leave --gpus_per_trial out "
            "to tune on CPUs, or run the trials on a runner whose workers have GPUs."
        )
    if gpus_per_trial < 1 or len(gpus) < 2:
        return  # one GPU: the trials share it, each with memory growth
    need = workers * gpus_per_trial
    if need > len(gpus):
        raise PipelineError(
            f"--gpus_per_trial={gpus_per_trial} with {workers} trial worker processes needs "
            f"{need} GPUs, but this host has {len(gpus)} ({VISIBLE_DEVICES}="
            f"{','.join(gpus)}); pass --tuner_parallel_trials="
            f"{max(1, len(gpus) // gpus_per_trial)} or a smaller --gpus_per_trial."
        )


def worker_gpus(index: int, gpus_per_trial: int, gpus: Sequence[str]) -> Optional[str]:
    """The ``CUDA_VISIBLE_DEVICES`` of pool worker ``index``; None to leave it as it is.

    None when ``gpus_per_trial`` is 0 (every worker sees every GPU) or the host has fewer
    than two GPUs (the trials share the one GPU, each with memory growth).
    """
    if gpus_per_trial < 1 or len(gpus) < 2:
        return None
    first = index * gpus_per_trial
    return ",".join(gpus[first : first + gpus_per_trial])


def hide_gpus(why: str) -> bool:
    """Hides the GPUs from TensorFlow in this process (not its children), so it never
    initializes one; for a launcher whose stages all run in other processes.

    Returns:
      True when hidden; False when TensorFlow had already initialized its devices here.
    """
    import tensorflow as tf

    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # devices initialized already: nothing to take back
        _LOG.info("GPUs not hidden from this process (%s): TensorFlow already started.", why)
        return False
    _LOG.info("GPUs hidden from this process: %s.", why)
    return True
