"""The user's training and tuning code in a process of its own, watched and time-limited.

``run_fn``, ``tuner_fn`` and a hypermodel's ``build`` are the user's code: an
``os._exit(0)``, a ``sys.exit(3)`` or a crash in them must not end the process that called
them (the launcher, on the DirectRunner, whose exit code and summary would then say
whatever that code chose), and a loop that never ends must be stoppable.
:func:`run_isolated` runs a function in a fork of the warm fork server
(:mod:`beam_pipeline.core.forked`, the ML stack already imported) and waits for its
answer: the function's return value, its :class:`PipelineError` re-raised here, or one
sentence naming what was running when the process ended (its exit code) or ran past its
time limit (the process is then killed). :class:`ProcessHost` keeps an object (the
tuner's oracle driver) in such a process and forwards calls to it.

The child writes its output (Keras's progress, logs) to this process's standard error,
which the CLI points at the run's log.

Example::

    result = run_isolated(run_trainer, (job,), what=f"The training code of {module}",
                          timeout=3600, timeout_flag="--trainer_timeout")
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.forked import InheritedFd, fork_context, start_forked

__all__ = ["ProcessHost", "UserCodeAborted", "UserCodeExit", "UserCodeTimeout", "run_isolated"]

_POLL_S = 0.5


class UserCodeExit(PipelineError):
    """The user's code ended the process that ran it (an exit call, a crash, a kill)."""


class UserCodeTimeout(PipelineError):
    """The user's code ran past its time limit and its process was killed."""


class UserCodeAborted(PipelineError):
    """The caller's ``abort`` check gave a reason, and the process was killed."""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "unknown"


def _ended(what: str, code: Optional[int]) -> str:
    """One sentence: how the process running ``what`` ended, and the fix."""
    if code == -signal.SIGKILL:  # what the kernel's out-of-memory killer sends
        return (
            f"{what} was killed by signal {-code} before it returned (out of memory, most "
            "likely); give it more memory, or make the model or its batches smaller."
        )
    if code is not None and code < 0:
        return (
            f"{what} was ended by signal {-code} ({_signal_name(-code)}) before it returned "
            "(a crash in native code, or a signal sent to it); see the run's log for its "
            "last lines."
        )
    return (
        f"{what} ended its process with exit code {code} (an os._exit or sys.exit call, or a "
        "crash) before it returned; remove that call (or see the run's log for the crash)."
    )


def _child_setup(stderr: int, env: dict) -> None:
    """In the child: output to the caller's standard error, the caller's environment, and
    Ctrl-C left to the caller. A terminal's Ctrl-C reaches the whole process group: user
    code that got it first answered with its KeyboardInterrupt, which the caller reported
    as the stage's unexpected error instead of an interrupted run; the caller, interrupted
    too, stops this process itself (SIGTERM, see :func:`_stop`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.dup2(stderr, 1)
    os.dup2(stderr, 2)
    os.close(stderr)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # the fork server's may be cached; TMPDIR is the caller's
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
    )


def _raised(conn, e: BaseException) -> None:
    """Sends an exception to the caller (a PipelineError as it is; any other, whose
    traceback stays in this process's log, as a RuntimeError if it does not pickle)."""
    if not isinstance(e, PipelineError):
        logging.getLogger(__name__).exception("Raised in a user-code process")
    try:
        conn.send(("raise", e))
    except Exception:  # noqa: BLE001  an exception that does not pickle
        conn.send(("raise", RuntimeError(f"{type(e).__name__}: {e}")))


def _serve_call(target: Callable, args: tuple, conn, stderr: int, env: dict) -> None:
    _child_setup(stderr, env)

    def doing(what: str) -> None:
        conn.send(("doing", what))

    try:
        value = target(*args, doing=doing)
    except SystemExit as e:
        conn.send(("exit", e.code if isinstance(e.code, int) else 1))
    except BaseException as e:  # noqa: BLE001  raised again in the caller
        _raised(conn, e)
    else:
        conn.send(("return", value))
    conn.close()


def _wait(
    process,
    conn,
    what: str,
    timeout: Optional[float],
    timeout_flag: str,
    abort: Optional[Callable[[], Optional[str]]] = None,
):
    """The child's answer (``(kind, value)``); raises when it ends, times out or is
    aborted (``abort()`` returned a reason) without one."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        reason = abort() if abort is not None else None
        if reason is not None:
            process.kill()
            process.join()
            raise UserCodeAborted(reason)
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            process.kill()
            process.join()
            raise UserCodeTimeout(
                f"{what} ran past {timeout_flag}={timeout:g} s and was stopped; raise "
                f"{timeout_flag}, or make it do less (fewer steps)."
            )
        # Alive or not is read before the poll: a child that sent its answer and then
        # ended between a poll that found nothing and this check would otherwise be taken
        # for one that ended without answering (a model blessed in the sandbox reported
        # "ended its process with exit code 0").
        alive = process.is_alive()
        try:
            ready = conn.poll(_POLL_S if left is None else min(_POLL_S, left))
            message = conn.recv() if ready else None
        except (EOFError, OSError):  # the child is gone without an answer
            message = ("exit", None)
        if message is None:
            if alive:
                continue
            message = ("exit", None)
        kind, value = message
        if kind == "doing":
            what = value
            continue
        if kind == "exit":
            process.join()
            code = process.exitcode if value is None else value
            raise UserCodeExit(_ended(what, code))
        return kind, value, what


def _stop(process, grace: float, *, terminate: bool) -> None:
    """Ends ``process`` if it still runs: SIGTERM first where ``terminate``, then up to
    ``grace`` seconds for it to end, then SIGKILL."""
    if process.is_alive():
        if terminate:
            process.terminate()
        process.join(timeout=grace)
        if process.is_alive():
            process.kill()
            process.join()


def run_isolated(
    target: Callable[..., Any],
    args: tuple,
    *,
    what: str,
    timeout: Optional[float] = None,
    timeout_flag: str = "the time limit",
    name: str = "user-code",
    abort: Optional[Callable[[], Optional[str]]] = None,
) -> Any:
    """``target(*args, doing=...)`` in a process of its own; its return value.

    ``target`` gets a ``doing(text)`` callback: what it calls next ("run_fn in m.py"), so
    that an exit or a timeout names it.

    Args:
      target: a module-level function (it is pickled by name).
      args: its arguments (pickled).
      what: what runs until ``doing`` says otherwise, named in the errors.
      timeout: seconds before the process is killed (None: no limit).
      timeout_flag: the flag that sets ``timeout``, named in the error.
      name: the process's name.
      abort: polled while the process runs; a reason (not None) kills it (a peer of a
        multi-worker training failed: this one cannot go on).

    Raises:
      PipelineError: the one ``target`` raised (any other exception too, as raised).
      UserCodeExit: the process ended without an answer (its exit code in the message).
      UserCodeTimeout: it ran past ``timeout``.
      UserCodeAborted: ``abort`` gave a reason.
    """
    receive, send = fork_context().Pipe(duplex=False)
    process = start_forked(
        _serve_call, (target, args, send, InheritedFd(2), dict(os.environ)), name=name
    )
    send.close()
    try:
        kind, value, _ = _wait(process, receive, what, timeout, timeout_flag, abort)
    except BaseException:
        # The caller stops (Ctrl-C or SIGTERM to this process alone, or its own error):
        # the child's work is no longer wanted; it gets SIGTERM and a few seconds to end.
        _stop(process, 5, terminate=True)
        raise
    finally:
        receive.close()
        _stop(process, 30, terminate=False)  # it answered: its exit follows
    if kind == "raise":
        raise value
    return value


def _serve_object(factory: Callable, args: tuple, conn, stderr: int, env: dict) -> None:
    _child_setup(stderr, env)

    def doing(what: str) -> None:
        conn.send(("doing", what))

    try:
        hosted = factory(*args, doing=doing)
    except SystemExit as e:
        conn.send(("exit", e.code if isinstance(e.code, int) else 1))
        return
    except BaseException as e:  # noqa: BLE001  raised again in the caller
        _raised(conn, e)
        return
    conn.send(("return", None))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        kind, name, args, kwargs = request
        try:
            if kind == "getattr":
                value = getattr(hosted, name)
                answer = ("callable", None) if callable(value) else ("return", value)
            elif kind == "call":
                answer = ("return", getattr(hosted, name)(*args, **kwargs))
            else:  # "apply": a module-level function of the hosted object
                answer = ("return", name(hosted, *args, **kwargs))
        except SystemExit as e:
            conn.send(("exit", e.code if isinstance(e.code, int) else 1))
            return
        except BaseException as e:  # noqa: BLE001  raised again in the caller
            _raised(conn, e)
            continue
        conn.send(answer)


class ProcessHost:
    """An object made and kept in a process of its own; attribute reads and calls go there.

    ``factory(*args, doing=...)`` makes the object in the child (the user's code that
    runs then, e.g. ``tuner_fn``, says what it is through ``doing``); afterwards
    ``host.proxy.attr`` reads an attribute (a method comes back as a function that calls
    it there) and :meth:`apply` runs a module-level function on it. Exceptions come back
    as they were raised; an exit of the process becomes :class:`UserCodeExit`.

    Example::

        with ProcessHost(make_driver, (job,), what="tuner_fn in m.py") as host:
            specs = host.proxy.ask(2)
    """

    def __init__(self, factory: Callable, args: tuple, *, what: str, name: str) -> None:
        self._conn, send = fork_context().Pipe(duplex=True)
        self._process = start_forked(
            _serve_object, (factory, args, send, InheritedFd(2), dict(os.environ)), name=name
        )
        send.close()
        self.proxy = _Proxy(self)
        try:
            kind, value, _ = _wait(self._process, self._conn, what, None, "")
        except BaseException:
            self.close()
            raise
        if kind == "raise":
            self.close()
            raise value

    def request(self, kind: str, name: Any, args: tuple = (), kwargs: Optional[dict] = None):
        what = f"the oracle's {getattr(name, '__name__', name)}"
        try:
            self._conn.send((kind, name, args, kwargs or {}))
        except OSError:
            pass  # gone: _wait reports how it ended
        answer, value, _ = _wait(self._process, self._conn, what, None, "")
        if answer == "raise":
            raise value
        return answer, value

    def apply(self, function: Callable, *args: Any, **kwargs: Any) -> Any:
        """``function(hosted_object, *args, **kwargs)`` in the host process."""
        return self.request("apply", function, args, kwargs)[1]

    def close(self) -> None:
        try:
            self._conn.send(None)
        except OSError:
            pass
        self._conn.close()
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()

    def __enter__(self) -> ProcessHost:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class _Proxy:
    """The hosted object as the caller sees it: reads and calls go to the host process."""

    def __init__(self, host: ProcessHost) -> None:
        object.__setattr__(self, "_host", host)

    def __getattr__(self, name: str) -> Any:
        host = object.__getattribute__(self, "_host")
        kind, value = host.request("getattr", name)
        if kind == "callable":
            return lambda *args, **kwargs: host.request("call", name, args, kwargs)[1]
        return value
