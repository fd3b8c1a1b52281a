"""Processes forked from one warm server that imported the ML stack (multiprocessing's forkserver).

The local worker pool's processes (:mod:`beam_pipeline.runtime.pool`), the DirectRunner's
forked SDK workers and the processes that run the user's training and tuning code
(:mod:`trainer.isolation`) all start here: a fork of a server that imported TensorFlow,
keras-tuner, tf.Transform and Beam's SDK harness once (the preload
``beam_pipeline.runtime.pool_zygote``), ready in about a second. In ``core`` because
:mod:`trainer` starts such processes and must not import Beam; nothing here imports it.

Example::

    process = start_forked(target, (arg,), name="trainer")
    process.join()
"""

from __future__ import annotations

import io
import multiprocessing
import os
import tempfile
import threading
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.context import ForkServerProcess, set_spawning_popen
from typing import Optional

__all__ = [
    "InheritedFd",
    "fork_context",
    "fork_server_warm",
    "mark_fork_server_warm",
    "start_forked",
    "warm_fork_server",
]

# The server's module: a string, so importing this module imports nothing of Beam's.
_PRELOAD = "beam_pipeline.runtime.pool_zygote"
# The modules the stages' Beam workers import, comma-separated, which the preload imports
# once for every forked worker (set by the launcher from the stage declarations).
WORKER_MODULES_ENV = "BEAM_PIPELINE_WORKER_MODULES"
_FORK_LOCK = threading.Lock()
# The system's temporary folder, kept by beam_pipeline.runtime.scratch while a run's own
# folder is TMPDIR.
SYSTEM_TMPDIR = "BEAM_PIPELINE_SYSTEM_TMPDIR"


def _pin_multiprocessing_temp_dir() -> None:
    """multiprocessing's temporary folder in the system's, not the run's.

    The fork server listens on a socket there, and a socket's path may not be longer than
    107 bytes: a run's folder under a deep pipeline root (``<root>/tmp/run-*``), which a
    worker process started during the run has as TMPDIR, would make it too long.
    """
    system = os.environ.get(SYSTEM_TMPDIR)
    if not system or multiprocessing.current_process()._config.get("tempdir") is not None:
        return
    saved = tempfile.tempdir
    tempfile.tempdir = system
    try:
        util.get_temp_dir()
    finally:
        tempfile.tempdir = saved


class _ForkedPopen(popen_forkserver.Popen):
    """multiprocessing's forkserver launch, minus re-running the launcher's main script.

    multiprocessing makes every child import the parent's ``__main__`` file again (as
    ``__mp_main__``), so that functions defined there unpickle. A forked process runs a
    function of this package and needs nothing of it, and a user's script that calls the
    pipeline without an ``if __name__ == "__main__":`` guard would start a pool in each
    of its pool processes. multiprocessing has no switch for this, so this is
    ``popen_forkserver.Popen._launch`` (Python 3.10-3.13, identical) with the main
    module's entries left out of the preparation data.
    """

    def _launch(self, process_obj):
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        _parent_w = os.dup(w)  # the child's sentinel of its parent, as multiprocessing keeps
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _ForkedProcess(ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):  # noqa: N802  multiprocessing's name
        return _ForkedPopen(process_obj)


def fork_context():
    """multiprocessing's ``forkserver`` context, its server preloading the ML stack.

    One server per launcher process, started on first use and kept until it exits (every
    pool of the run, and of a test session, forks from it). Why multiprocessing and not
    ``subprocess``: a fresh interpreter per pool process pays TensorFlow's imports (seconds
    of CPU) each time; why ``forkserver`` and not ``fork``: the launcher runs gRPC
    servers and Beam threads, which a fork of it would copy half-held, while the server
    only imported modules and started nothing.
    """
    ctx = multiprocessing.get_context("forkserver")
    with _FORK_LOCK:
        _pin_multiprocessing_temp_dir()
        ctx.set_forkserver_preload([_PRELOAD])
    return ctx


def start_forked(target, args: tuple, name: Optional[str] = None) -> ForkServerProcess:
    """Starts ``target(*args)`` in a fork of the fork server (the ML stack already
    imported) and returns the started process; not a daemon, so it may start processes of
    its own. The pool's workers start this way, the processes that run the user's training
    and tuning code (:mod:`trainer.isolation`), and the tests' killed-run launches,
    which need a whole CLI run in a process of its own without paying a fresh
    interpreter's imports."""
    fork_context()
    process = _ForkedProcess(target=target, args=args, name=name, daemon=False)
    with _FORK_LOCK:
        process.start()
    return process


# Set once a process forked from the server answered: the fork server has imported the ML
# stack (multiprocessing's server handles a request only after its preload), so a fork
# from it is ready at once.
_server_warm = threading.Event()


def mark_fork_server_warm() -> None:
    """Called when a process forked from the server answered: its preload is done."""
    _server_warm.set()


def fork_server_warm() -> bool:
    """Whether the fork server of :func:`start_forked` is up with its imports done."""
    return _server_warm.is_set()


_warm_up_started = threading.Event()


def warm_fork_server() -> None:
    """Starts the fork server's imports in the background (idempotent, returns at once).

    A ``multi_processing`` run calls it first thing, so the server imports the ML stack on
    a core the launcher's own imports leave free, and the workers of its Transform and
    Evaluator jobs (which import TensorFlow, seconds of CPU each as fresh interpreters)
    start as forks of it (:mod:`beam_pipeline.runtime.forked_sdk_worker`). Until the
    server answers, workers start as Beam starts them: a job never waits for it.
    """
    if _server_warm.is_set() or _warm_up_started.is_set() or not hasattr(os, "fork"):
        return  # warm or warming; or no fork server on this platform (Beam's workers then)
    _warm_up_started.set()
    threading.Thread(target=_warm_up, name="fork-server-warm-up", daemon=True).start()


def _warm_up() -> None:
    try:
        ready, answer = fork_context().Pipe(duplex=False)
        # Answered only once the server has forked it: after its preload.
        process = start_forked(_answer, (answer,), name="fork-server-warm-up")
        answer.close()
        ready.recv()
        _server_warm.set()
        process.join()
    except (EOFError, OSError):  # the server did not start: workers stay Beam's own
        pass


def _answer(conn) -> None:
    conn.send(True)
    conn.close()


class InheritedFd:
    """A file descriptor of the launcher that the fork gets as its own: pickled while
    multiprocessing starts the process (``DupFd`` sends it along with the fork request),
    unpickled in the fork as the descriptor's number there."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self):
        from multiprocessing.reduction import DupFd

        return _detach, (DupFd(self.fd),)


def _detach(dup_fd) -> int:
    return dup_fd.detach()
