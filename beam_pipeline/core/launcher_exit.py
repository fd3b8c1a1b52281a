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
    swallowed. Blocks on several threads at once (the Evaluator and the InfraValidator
    run together) each put back what they found, and a replacement left behind by
    another thread's block does nothing once its block ended.

    Raises:
      LauncherExit: the block called ``os._exit`` or ``sys.exit``.
    """
    real_exit = os._exit
    launcher = os.getpid()
    calls: list[str] = []
    active = [True]

    def refused(error: str) -> LauncherExit:
        return LauncherExit(
            f"{what} called {error} in the launcher, which would end the run with no summary "
            f"and its staging folders left behind; {fix}."
        )

    def refuse_exit(code: int) -> None:
        if not active[0] or os.getpid() != launcher:
            real_exit(code)
        calls.append(f"os._exit({code!r})")
        raise refused(calls[0])

    os._exit = refuse_exit
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
        active[0] = False
        if os._exit is refuse_exit:
            os._exit = real_exit
    if calls:  # the code caught the refusal and went on
        raise refused(calls[0])
