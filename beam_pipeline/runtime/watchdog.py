"""The watchdog: no job waits forever for workers that never start or died.

A portable runner's job whose SDK workers die mid-job (killed for memory) or never start
just sits in RUNNING. :func:`watch` wraps every job the launcher submits (through
:func:`beam_pipeline.runtime.options.run_pipeline`): while the job runs, its workers must show
life; if none does for ``worker_start_timeout`` seconds the job is cancelled and the run
fails with one sentence naming the job, the environment, what the worker said last (the
local pool's log) and the fix. A worker is seen alive when the local pool (found by its
listening port) has a live child process; for workers this machine cannot see (Dataflow,
a cluster, containers) the job counts as alive once its runner reports it RUNNING, so
only a job that never starts is bounded there. Hand-written because Beam has no such
bound (its portable job service and FnApiRunner wait for a worker's connection forever).

Example::

    result = watch(p.run(), options, "Transform", 120)
    result.wait_until_finish()                      # PipelineError if no worker shows life
"""

from __future__ import annotations

import os
import time
from typing import Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.runtime.background import BackgroundCall
from beam_pipeline.runtime.inspection import (
    describe_environment,
    inspect_pool,
    local_pool_address,
    pool_children,
    pool_pid,
)

__all__ = ["DEFAULT_WORKER_START_TIMEOUT", "watch"]

# A local pool's worker starts and runs a one-element job (the pre-flight probe) in seconds,
# even on a small, loaded machine; 120 s leaves room for a busier machine or a container's
# start without letting a dead worker hold a run for long.
DEFAULT_WORKER_START_TIMEOUT = 120.0

_NOT_STARTED = {"STARTING", "PENDING", "STOPPED", "UNKNOWN", "UNRECOGNIZED"}


class _Watched:
    """A ``PipelineResult`` whose ``wait_until_finish`` fails a job no worker serves."""

    def __init__(self, result, options, what: str, timeout: float) -> None:
        self._result = result
        self._options = options
        self._what = what
        self._timeout = timeout
        self._address = local_pool_address(options)
        self._pid: Optional[int] = None
        self._seen_pool = False

    def __getattr__(self, name: str):
        return getattr(self._result, name)

    def _alive(self) -> bool:
        if self._address is not None:
            if self._pid is None or not os.path.exists(f"/proc/{self._pid}"):
                self._pid = pool_pid(self._address)  # found again if the pool restarted
            if self._pid is not None:
                self._seen_pool = True
                return bool(pool_children(self._pid)[0])
            if self._seen_pool:
                return False  # the pool this job's workers came from is gone
        # Workers this machine cannot see: the runner's word that the job runs.
        try:
            state = str(self._result.state).rsplit(".", 1)[-1].upper()
        except Exception:  # noqa: BLE001  a runner that cannot say: assume it works
            return True
        return state not in _NOT_STARTED

    def wait_until_finish(self, duration=None):
        if duration:
            return self._result.wait_until_finish(duration)
        waiting = BackgroundCall(self._result.wait_until_finish, f"beam-wait-{self._what}")
        waiter = waiting.thread
        poll = min(2.0, max(0.2, self._timeout / 20))
        alive_at = time.monotonic()
        while waiter.is_alive():
            waiter.join(timeout=poll)
            if not waiter.is_alive():
                break
            if self._alive():
                alive_at = time.monotonic()
            elif time.monotonic() - alive_at > self._timeout:
                raise self._stalled()
        return waiting.get()

    def _stalled(self) -> PipelineError:
        try:
            self._result.cancel()
        except Exception:  # noqa: BLE001  runners that cannot cancel; the job is abandoned
            pass
        from beam_pipeline.runtime.runners import describe_job

        job = describe_job(self._result, self._options)
        env = describe_environment(self._options)
        if self._address is not None:
            seen = inspect_pool(self._address)
            if not seen.said and "SIGKILL" not in seen.ended:
                seen = inspect_pool(self._address, check_python=True)  # about a second
            if seen.pid is None:
                state = "its worker pool no longer answers"
            elif seen.dead:
                state = f"its workers ended: {seen.ended}" if seen.ended else ("its workers exited")
            else:
                state = "the pool started no worker for it"
            said = f" ({seen.said})" if seen.said else ""
            log = f", log {seen.log}" if seen.log else ""
            detail = f"{state}{said}{log}; {seen.fix}"
        else:
            detail = (
                "its runner never reported it running; read that job's worker logs (the "
                "worker image must hold this project), fix the cause and rerun with the same "
                "--run_id"
            )
        return PipelineError(
            f"The {self._what} job ({job}) was cancelled after {self._timeout:.0f} s "
            f"(--worker_start_timeout) without a live worker on {env}: {detail}."
        )


def watch(result, options, what: str, timeout: float = DEFAULT_WORKER_START_TIMEOUT):
    """``result`` with a ``wait_until_finish`` that fails a job no worker serves.

    Args:
      result: what ``pipeline.run()`` returned (a portable, Flink, Spark or Dataflow job).
      options: the job's ``PipelineOptions``.
      what: the job's name in the message.
      timeout: seconds without a live worker before the job is cancelled.

    Returns:
      a result that delegates everything else to ``result``.
    """
    return _Watched(result, options, what, timeout)
