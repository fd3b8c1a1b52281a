"""Imported once by the local worker pool's fork server: the ML stack every pool process needs.

:class:`~beam_pipeline.runtime.pool.LocalWorkerPool` starts its processes with
multiprocessing's ``forkserver`` and this module as its preload: one process pays the
imports (TensorFlow, keras-tuner, tf.Transform, Beam's SDK harness: seconds of CPU) and
every pool process is a fork of it, ready far sooner and sharing
those pages copy-on-write, where a fresh interpreter per process paid them each time.

Importing must not start TensorFlow's runtime (its thread pools would not survive the
fork, and each process sizes its own with :func:`trainer.process.limit_threads` after it):
only imports here, no op. The fork server writes to nothing the user sees (TensorFlow's
import-time lines would reach the launcher's terminal); each forked process sends its own
output to its log.
"""

import os

from beam_pipeline.console import quiet_environment
from beam_pipeline.core.gpus import gpu_environment
from beam_pipeline.runtime.stack_imports import import_stack


def server_environment() -> None:
    """The fork server's environment and output, which its forks inherit."""
    quiet_environment(os.environ)
    gpu_environment(os.environ)  # its forks inherit it (a launcher of the Python API too)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


server_environment()

try:
    # A no-op where the server is a fork of a launcher that imported them already; its
    # objects frozen either way (see import_stack), and every fork inherits that.
    import_stack()
except Exception:  # noqa: BLE001, S110
    # A broken import must not take the fork server down (every pool start would then fail
    # inside multiprocessing): each forked process imports again and fails in its own log,
    # which the pool's error names.
    pass
