"""A call on a daemon thread, and what it returned or raised, handed to the caller's thread.

Used wherever a Beam call may never return (a job whose worker never connects, an abandoned
job on Beam's embedded job service) while the caller watches something else: the watchdog,
the pool pre-flight, a tuning round on the local pool.

Example::

    call = BackgroundCall(lambda: p.run().wait_until_finish(), "beam-job")
    call.thread.join(timeout=5)
    if not call.thread.is_alive():
        state = call.get()        # or raises what the call raised
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, Optional

__all__ = ["BackgroundCall"]


@dataclasses.dataclass
class BackgroundCall:
    """``fn()`` started on a daemon thread named ``name``, and what it returned or raised.

    Daemon, so that a call that never returns (a Beam job whose worker never connects, an
    abandoned job on Beam's embedded job service) cannot keep the process alive; what it
    raised is handed to the caller's thread by :meth:`get`.
    """

    fn: Callable[[], Any]
    name: str
    result: Any = None
    error: Optional[BaseException] = None
    thread: threading.Thread = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._call, name=self.name, daemon=True)
        self.thread.start()

    def _call(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: BLE001  handed to the caller's thread by get()
            self.error = e

    def get(self) -> Any:
        """What ``fn()`` returned, or raises what it raised (once the thread has ended)."""
        if self.error is not None:
            raise self.error
        return self.result
