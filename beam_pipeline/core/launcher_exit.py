"""The user's code that runs in the launcher may not end the launcher's process.

Most user code runs in a process of its own (``trainer.isolation``), where an exit call
ends that process only. Two kinds run in the launcher itself: ``preprocessing_fn``, which
tf.Transform traces while it builds the Transform job, and the ``run`` of a stage of a
``--graph`` of the user's own. An ``os._exit(0)`` there would end the run with exit code
0, no summary, its staging folders and the store's record left behind; ``sys.exit`` would
unwind past the runner as if the run had succeeded. :func:`exit_refused` turns either into
one sentence naming the code, raised where the call was, so the run fails as for any
other error of that code.

``os._exit`` runs no handler (no ``atexit``, no ``finally``, no audit event), so while
the code runs it is replaced by a function that raises instead; the real one is put back
after. Moving this code to another process instead (as ``run_fn`` is) cannot be done: a
stage's ``run`` gets the run's context (its store, its events), which does not pickle,
and tf.Transform needs the traced graph in the launcher.

Example::

    with exit_refused(f"preprocessing_fn in {module}", "return its outputs instead"):
        result = p | "Transform" >> transform
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from beam_pipeline.core.errors import PipelineError

__all__ = ["LauncherExit", "exit_refused"]


class LauncherExit(PipelineError):
    """User code running in the launcher called ``os._exit`` or ``sys.exit``."""


@contextlib.contextmanager
def exit_refused(what: str, fix: str) -> Iterator[None]:
    """While the block runs, ``os._exit`` and ``sys.exit`` in the launcher raise
    :class:`LauncherExit` ("``what`` called os._exit(0) in the launcher, ...; ``fix``.").

    A process the code forks (whose pid differs) still exits as asked. The exception is
    raised at the block's end too when the code caught it, so an exit call is never
    swallowed. Blocks run on several threads at once (stages run together): a call is
    refused with the sentence of the block its thread is in, and the real ``os._exit`` is
    back once every block ended.

    Raises:
      LauncherExit: the block called ``os._exit`` or ``sys.exit``.
    """
    calls: list[str] = []

    def refused(error: str) -> LauncherExit:
        return LauncherExit(
            f"{what} called {error} in the launcher, which would end the run with no summary "
            f"and its staging folders left behind; {fix}."
        )

    # One replacement for every block at once, answering for the block of the thread that
    # calls it: two stages of a --graph on two threads each get their own sentence (a
    # replacement per block named whichever block began last).
    dispatch = os._exit if isinstance(os._exit, _Refusals) else _Refusals(os._exit)
    block = (refused, calls)
    dispatch.enter(block)
    os._exit = dispatch
    try:
        yield
    except SystemExit as e:
        raise refused(calls[0] if calls else f"sys.exit({e.code!r})") from None
    except KeyboardInterrupt:
        raise
    except BaseException:
        if calls:  # the refusal, or what the code (or tf.Transform) made of it
            raise refused(calls[0]) from None
        raise
    finally:
        if dispatch.leave(block) and os._exit is dispatch:
            os._exit = dispatch.real
    if calls:  # the code caught the refusal and went on
        raise refused(calls[0])


class _Refusals:
    """``os._exit`` while blocks of :func:`exit_refused` run: a call from a thread inside a
    block is refused with that block's sentence (from another thread of the launcher, with
    the latest block's); in a process the code forked, or once every block ended, it
    exits as asked."""

    def __init__(self, real) -> None:
        self.real = real
        self.launcher = os.getpid()
        self._lock = threading.Lock()
        self._blocks: list[tuple[int, tuple]] = []  # (thread id, block), in entry order

    def enter(self, block: tuple) -> None:
        with self._lock:
            self._blocks.append((threading.get_ident(), block))

    def leave(self, block: tuple) -> bool:
        """Ends ``block``; True when no block is left."""
        with self._lock:
            self._blocks = [(t, b) for t, b in self._blocks if b is not block]
            return not self._blocks

    def __call__(self, code: int) -> None:
        with self._lock:
            here = [b for t, b in self._blocks if t == threading.get_ident()]
            block = (here or [b for _, b in self._blocks] or [None])[-1]
        if block is None or os.getpid() != self.launcher:
            self.real(code)
            return
        refused, calls = block
        calls.append(f"os._exit({code!r})")
        raise refused(calls[0])
