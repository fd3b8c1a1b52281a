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

import contextlib
import importlib
import io
import logging
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
from multiprocessing import (
    forkserver,
    popen_forkserver,
    reduction,
    resource_tracker,
    spawn,
    util,
)
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


def warm_fork_server(early: bool = False) -> None:
    """Starts the fork server, its imports done at once or in the background (idempotent).

    ``early``: called before the run's checks, to overlap a fresh server's imports with
    them; a launcher that can fork the server from itself leaves it for a later call
    (its own imports would only delay the checks, and a bad flag's one sentence).

    A launcher with one thread and no TensorFlow runtime started (the CLI, early in a
    run) imports the ML stack itself, as it would to run its stages, and forks the server
    from itself (:func:`_fork_server_from_here`): the stack is imported once, not once
    here and once more in a fresh server. Elsewhere (a caller's process with threads of
    its own: a test runner, a notebook) the server is a fresh interpreter, started in the
    background so that its imports run on a core the launcher's own imports leave free.
    Either way the workers of a ``multi_processing`` run's Transform and Evaluator jobs
    (which import TensorFlow, seconds of CPU each as fresh interpreters) start as forks of
    it (:mod:`beam_pipeline.runtime.forked_sdk_worker`). Until the server answers,
    workers start as Beam starts them: a job never waits for it.
    """
    if _server_warm.is_set() or _warm_up_started.is_set() or not hasattr(os, "fork"):
        return  # warm or warming; or no fork server on this platform (Beam's workers then)
    if early and _forkable_here():
        return
    _warm_up_started.set()
    if _fork_server_from_here():
        _server_warm.set()
        return
    threading.Thread(target=_warm_up, name="fork-server-warm-up", daemon=True).start()


_STACK_IMPORTS = "beam_pipeline.runtime.stack_imports"  # a string: core imports no Beam
_FORKSERVER_MAIN = "from multiprocessing.forkserver import main"
# What a fork server forked from the launcher holds of the launcher's and must never free
# (their descriptors are closed there and their numbers reused).
_KEPT: list = []


# Held by a launcher thread that may run when the fork server is forked (the progress
# display's) while it does anything between its waits: the fork happens with it held, so
# that thread holds no lock then (its stream's, rich's) that the fork would copy held.
_GATE = threading.Lock()
_gated: set = set()  # the idents of the threads that take the gate


@contextlib.contextmanager
def gated_thread():
    """Declares the calling thread one that takes :func:`fork_gate` around its work, so a
    fork server may be forked while it lives; for the duration of the ``with``."""
    _gated.add(threading.get_ident())
    try:
        yield
    finally:
        _gated.discard(threading.get_ident())


def fork_gate() -> threading.Lock:
    """What a :func:`gated_thread` holds while it works (never while it waits)."""
    return _GATE


def _forkable_here() -> bool:
    """The main thread, every other thread a gated one, and no TensorFlow runtime: a fork of
    this process (made with the gate held) holds no lock another thread held and no
    half-copied thread pool."""
    if threading.current_thread() is not threading.main_thread():
        return False
    me = threading.get_ident()
    if any(t.ident not in _gated for t in threading.enumerate() if t.ident != me):
        return False
    if "tensorflow" in sys.modules:
        from tensorflow.python.eager import context

        ctx = context.context_safe()
        if ctx is not None and getattr(ctx, "_initialized", True):
            return False
    return True


def _fork_server_from_here() -> bool:
    """Imports the ML stack here and starts multiprocessing's fork server as a fork of this
    process instead of a fresh interpreter; False (nothing started) where this process
    cannot be forked safely or an import fails (the fresh server then reports it).

    multiprocessing has no hook for this: ``ForkServer.ensure_running`` starts the server
    with ``util.spawnv_passfds`` running ``python -c "from multiprocessing.forkserver
    import main; main(...)"``, so that one call is answered with a fork that runs the same
    code (:func:`_spawn_by_fork`). Any other command, or a Python whose command differs,
    is spawned as before."""
    if not _forkable_here():
        return False
    try:
        importlib.import_module(_STACK_IMPORTS).import_stack()
    except Exception:  # noqa: BLE001 - the fresh server's preload fails the same way, and says so
        return False
    if not _forkable_here():  # an import that started a thread
        return False
    fork_context()
    spawn_by_exec = util.spawnv_passfds
    util.spawnv_passfds = _spawn_by_fork(spawn_by_exec)
    try:
        with _FORK_LOCK, _GATE:
            forkserver.ensure_running()
    finally:
        util.spawnv_passfds = spawn_by_exec
    return True


def _spawn_by_fork(spawn_by_exec):
    def spawn(path, args, passfds):
        command = args[-1] if len(args) >= 2 and args[-2] == "-c" else ""
        if not command.startswith(_FORKSERVER_MAIN):
            return spawn_by_exec(path, args, passfds)
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            util.spawnv_passfds = spawn_by_exec  # this process's own forks spawn as before
            _as_a_fresh_process(passfds)
            exec(command, {"__name__": "__mp_forkserver__"})  # noqa: S102 - multiprocessing's own
            code = 0
        except SystemExit as e:  # the server's end: every client closed its pipe
            code = e.code if isinstance(e.code, int) else 0
        finally:
            os._exit(code)  # never the launcher's atexit handlers, nor its frames unwound

    return spawn


def _as_a_fresh_process(passfds) -> None:
    """In the forked server, before it serves: what a fresh interpreter would not have of
    the launcher. Its signal handlers (a fresh one has Python's defaults; ignored signals
    stay ignored, as across exec), its hooks, its logging handlers (on the launcher's log)
    and every descriptor but 0, 1, 2 and ``passfds`` (as ``spawnv_passfds`` closes them)."""
    global _FORK_LOCK, _GATE
    _GATE = threading.Lock()
    _gated.clear()
    # Held by the launcher's thread that forked: a fresh process has them free, and
    # multiprocessing's fork server and resource tracker of its own to start on first use
    # (the launcher's are not this process's children, and their descriptors close below).
    _FORK_LOCK = threading.Lock()
    # (In place: the modules' functions are bound methods of these very objects.)
    forkserver._forkserver.__init__()  # noqa: SLF001
    resource_tracker._resource_tracker.__init__()  # noqa: SLF001
    # Set by the launcher just before it forked this: here no server is warm or warming.
    _server_warm.clear()
    _warm_up_started.clear()
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
        except (OSError, ValueError):
            continue
        if callable(handler) and handler is not signal.default_int_handler:
            signal.signal(
                sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            )
    signal.set_wakeup_fd(-1)
    sys.unraisablehook = sys.__unraisablehook__
    sys.excepthook = sys.__excepthook__
    threading.excepthook = threading.__excepthook__
    loggers = [logging.getLogger()] + [
        log for log in logging.Logger.manager.loggerDict.values() if isinstance(log, logging.Logger)
    ]
    for log in loggers:
        _KEPT.extend(log.handlers)
        log.handlers = []
    logging.getLogger().setLevel(logging.WARNING)
    tempfile.tempdir = None  # from the environment, as a fresh interpreter finds it
    # The standard streams on descriptors 1 and 2, as a fresh interpreter has them: the
    # caller may have replaced them (pytest's capture writes to a file of its own, whose
    # descriptor closes below, so a fork's prints went nowhere).
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's own, never closed
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    _KEPT.extend((sys.__stdout__, sys.__stderr__))
    sys.__stdout__, sys.__stderr__ = sys.stdout, sys.stderr
    low = 3
    for fd in sorted(set(passfds)):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, _max_fd())


def _max_fd() -> int:
    try:
        return max(int(name) for name in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return os.sysconf("SC_OPEN_MAX")


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
