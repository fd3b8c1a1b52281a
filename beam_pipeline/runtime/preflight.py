"""Pre-flight: a local EXTERNAL worker pool must start a worker that imports this project.

A portable runner's job whose SDK workers cannot start (a pool whose ``python`` has no
Apache Beam, an image without this package) just sits in RUNNING: Beam's runners wait for
the worker's control connection without a time limit. Before the first job,
:func:`check_worker_pool` asks a pool at an address of this machine for one worker through
the same Fn API as a job and runs a probe step on it that imports ``apache_beam`` and this
package; else one sentence with what the worker said and the fix.

Example::

    check_worker_pool(options, timeout=120)          # before the first job
    join = start_worker_pool_check(options, 120)     # or overlapped with other work
    join()                                           # raises the check's PipelineError
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from collections.abc import Callable
from typing import Any

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.runtime.background import BackgroundCall
from beam_pipeline.runtime.inspection import (
    describe_environment,
    fix_for,
    inspect_pool,
    last_error_line,
    local_pool_address,
    pool_children,
    pool_pid,
    wait_status,
)
from beam_pipeline.runtime.watchdog import DEFAULT_WORKER_START_TIMEOUT

__all__ = ["check_worker_pool", "start_worker_pool_check"]

_EXIT_GRACE_S = 3.0  # a probe job still ending when its worker has exited


def _probe(_: Any) -> None:
    """Runs on a pool worker (unpickling it imports this package): its siblings are there too."""
    for name in ("transforms", "trainer"):
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def check_worker_pool(options, timeout: float = DEFAULT_WORKER_START_TIMEOUT) -> bool:
    """Fails fast unless the local EXTERNAL worker pool starts a worker that imports this project.

    Does nothing (returns None) unless the job goes to ``--environment_type=EXTERNAL`` at an
    address of this machine. Otherwise asks the pool for one worker, through the same
    Fn API as a job, and runs one probe step on it (a worker start: about a second or two).

    Args:
      options: the run's ``PipelineOptions``.
      timeout: seconds the worker may take to start (``--worker_start_timeout``).

    Returns:
      True when the pool was checked, False when there is nothing to check.

    Raises:
      PipelineError: the pool does not answer, its worker dies or never starts, or it
        cannot import this project; the message says what the worker said and the fix.
    """
    address = local_pool_address(options)
    if address is None:
        return False
    import grpc

    env = describe_environment(options)
    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=min(timeout, 10.0))
    except grpc.FutureTimeoutError:
        raise PipelineError(
            f"The worker pool at {env} does not answer; start it first, e.g. "
            f"`.venv/bin/python -m beam_pipeline.runtime.worker_pool --service_port="
            f"{address.rsplit(':', 1)[-1]} &`, or pass the address it serves at."
        ) from None
    finally:
        channel.close()

    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.transforms import environments

    pool = pool_pid(address)
    before = set(pool_children(pool)[1]) if pool else set()
    p = beam.Pipeline(
        runner=fn_runner.FnApiRunner(default_environment=environments.ExternalEnvironment(address))
    )
    _ = p | "Probe" >> beam.Create([0]) | "Import" >> beam.Map(_probe)
    # A daemon thread: an FnApiRunner whose worker never connects waits forever.
    probe = BackgroundCall(lambda: p.run().wait_until_finish(), "beam-worker-pool-check")
    job = probe.thread
    deadline = time.monotonic() + timeout
    while job.is_alive() and time.monotonic() < deadline:
        job.join(timeout=0.25)
        alive, dead = pool_children(pool) if pool else ([], [])
        failed = [kid for kid in set(dead) - before if wait_status(kid) != 0]
        if failed and not alive:
            # The worker it started failed: no need to wait out the timeout (a healthy
            # probe's worker exits with 0 as its job ends; grace for such a job to end).
            job.join(timeout=_EXIT_GRACE_S)
            break
    if not job.is_alive() and probe.error is None:
        return True
    seen = inspect_pool(address, check_python=True)
    if probe.error is not None:
        said = last_error_line(str(probe.error)) or str(probe.error).strip()[-300:]
        fix = fix_for(said, seen.python, False, address)
        seen = dataclasses.replace(seen, said=said, fix=fix)
        what = "its worker failed the probe step"
    elif seen.dead and not seen.alive:
        what = "its worker exited at start"
    else:
        what = f"no worker of it started within {timeout:.0f} s (--worker_start_timeout)"
    said = f" ({seen.said})" if seen.said else ""
    log = f", log {seen.log}" if seen.log else ""
    raise PipelineError(
        f"The worker pool at {env} cannot run this project's steps: {what}{said}{log}; {seen.fix}."
    )


def start_worker_pool_check(
    options, timeout: float = DEFAULT_WORKER_START_TIMEOUT
) -> Callable[[], None]:
    """Runs :func:`check_worker_pool` in a daemon thread, so its worker start overlaps work.

    Returns:
      a function that waits for the check and raises its :class:`PipelineError`, if any.
    """
    if local_pool_address(options) is None:
        return lambda: None
    check = BackgroundCall(
        lambda: check_worker_pool(options, timeout), "beam-worker-pool-check-start"
    )

    def join() -> None:
        check.thread.join()
        check.get()

    return join
