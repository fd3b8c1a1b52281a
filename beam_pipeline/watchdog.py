"""No job waits forever: a pre-flight check of a local worker pool and a watchdog per job.

A portable runner's job whose SDK workers cannot start (a worker pool whose ``python``
has no Apache Beam, an image without this package) or die mid-job (killed for memory)
just sits in RUNNING: Beam's runners wait for the worker's control connection without a
time limit. Two guards:

- :func:`check_worker_pool`, before the first job, for ``--environment_type=EXTERNAL``
  at a local address: the pool must answer and one of its workers must run a probe step
  that imports ``apache_beam`` and this package; else one sentence with what the worker
  said and the fix.
- :func:`watch`, around every job the launcher submits (through
  :func:`beam_pipeline.beam_options.run_pipeline`): while the job runs, its workers must
  show life; if none does for ``worker_start_timeout`` seconds the job is cancelled and
  the run fails with one sentence naming the job, the environment, what the worker said
  last (the local pool's log) and the fix. A worker is seen alive when the local pool
  (found by its listening port) has a live child process; for workers this machine cannot
  see (Dataflow, a cluster, containers) the job counts as alive once its runner reports
  it RUNNING, so only a job that never starts is bounded there.

Hand-written because Beam has no such bound (its portable job service and FnApiRunner wait
for a worker's connection forever); the pool is inspected through ``/proc`` (Linux), and
where that cannot be read the message says less, never something wrong.

Example::

    check_worker_pool(options, timeout=120)        # before the first job
    result = watch(p.run(), options, "Transform", 120)
    result.wait_until_finish()                      # PipelineError if no worker shows life
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

from beam_pipeline.core.errors import PipelineError

__all__ = [
    "DEFAULT_WORKER_START_TIMEOUT",
    "PoolReport",
    "check_worker_pool",
    "environment_of",
    "inspect_pool",
    "start_worker_pool_check",
    "watch",
]

# Sized from measured start-up on this project's 2-core machine, shared and loaded (load
# average 9-10): a local pool's worker starts and runs a one-element job in 5-8 s (the
# pre-flight probe); 120 s leaves room for a busier machine or a container's start without
# letting a dead worker hold a run for long.
DEFAULT_WORKER_START_TIMEOUT = 120.0

_NOT_STARTED = {"STARTING", "PENDING", "STOPPED", "UNKNOWN", "UNRECOGNIZED"}
_STOCK_POOL = "apache_beam.runners.worker.worker_pool_main"
_OWN_POOL = "beam_pipeline.worker_pool"
_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*$")
_NO_BEAM = "No module named 'apache_beam'"
_EXIT_GRACE_S = 3.0  # a probe job still ending when its worker has exited


def environment_of(options) -> tuple[str, str]:
    """``(environment type, config)`` of a portable job, the type upper-cased (DOCKER by default).

    Dataflow's image comes from ``--sdk_container_image``.
    """
    from apache_beam.options import pipeline_options as po

    portable = options.view_as(po.PortableOptions)
    kind = (portable.environment_type or "DOCKER").upper()
    kind = kind.removeprefix("BEAM:ENV:").removesuffix(":V1")
    config = portable.environment_config or ""
    image = getattr(options.view_as(po.WorkerOptions), "sdk_container_image", None)
    if kind == "DOCKER" and not config and image:
        config = image
    return kind, config


def _local_pool_address(options) -> Optional[str]:
    """The EXTERNAL pool's address when the pool and the runner are on this machine."""
    from beam_pipeline.remote import remote_runner_reason

    kind, config = environment_of(options)
    if kind != "EXTERNAL" or not config or remote_runner_reason(options) is not None:
        return None
    return config


def _describe_environment(options) -> str:
    from apache_beam.options import pipeline_options as po

    kind, config = environment_of(options)
    runner = str(options.view_as(po.StandardOptions).runner or "")
    if "dataflow" in runner.lower():
        return f"the worker image {config or '(Dataflow default)'} (--sdk_container_image)"
    if kind == "DOCKER":
        return f"the worker image {config or '(Beam default)'} (--environment_type=DOCKER)"
    return f"--environment_type={kind} --environment_config={config}"


# ------------------------------------------------------------------ the pool, through /proc


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def _listening_pid(port: int) -> Optional[int]:
    """The process listening on TCP ``port`` on this machine, if /proc tells."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in _read(table).splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A":  # LISTEN
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return None
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return int(pid)
            except OSError:
                continue
    return None


def _children(pid: int) -> tuple[list[int], list[int]]:
    """``(alive, dead)`` child processes of ``pid`` (dead: exited, not yet reaped)."""
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            kids += [int(k) for k in _read(f"/proc/{pid}/task/{task}/children").split()]
    except OSError:
        return [], []
    alive, dead = [], []
    for kid in kids:
        stat = _read(f"/proc/{kid}/stat")
        state = stat.rsplit(")", 1)[-1].split()[:1]
        (dead if not state or state[0] in ("Z", "X") else alive).append(kid)
    return alive, dead


@dataclasses.dataclass(frozen=True)
class PoolReport:
    """What this machine can tell about a local worker pool.

    Attributes:
      address: the pool's address (``--environment_config``).
      pid: its process id, or None when no process of this machine listens there.
      alive: its live worker processes.
      dead: its workers that exited and were not reaped (Beam's pool never reaps them).
      log: the pool's log file (its standard error, where its workers write too), if a file.
      said: the last error line of that log, or of the pool's ``python`` importing
        apache_beam and this package, or "" when nothing can be read.
      python: the interpreter its workers run, when known.
      ended: how its dead workers ended ("killed (SIGKILL: ...)", "exited with code 1").
      fix: what to do about ``said`` (or about ``ended``).
    """

    address: str
    pid: Optional[int] = None
    alive: tuple[int, ...] = ()
    dead: tuple[int, ...] = ()
    log: str = ""
    said: str = ""
    python: str = ""
    ended: str = ""
    fix: str = ""


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    return errors[-1] if errors else ""


def _pool_python(pid: int) -> tuple[str, bool, dict[str, str]]:
    """``(interpreter its workers run, whether it is PATH's python, the pool's environment)``."""
    cmdline = _read(f"/proc/{pid}/cmdline").split("\0")
    environ = dict(
        item.split("=", 1) for item in _read(f"/proc/{pid}/environ").split("\0") if "=" in item
    )
    path = environ.get("PATH", "")
    if _STOCK_POOL in cmdline and not any(a.startswith("--container_executable") for a in cmdline):
        # Beam's pool runs ["python", "-c", ...]: the python its PATH finds.
        return shutil.which("python", path=path) or "", True, environ
    if _OWN_POOL in cmdline and cmdline[0]:
        # The pool's own argv[0] (not /proc/<pid>/exe: a venv's python is a symlink whose
        # target has no venv).
        argv0 = cmdline[0]
        if "/" not in argv0:
            return shutil.which(argv0, path=path) or "", False, environ
        return os.path.join(_cwd(pid), argv0), False, environ
    return "", False, environ


def _wait_status(pid: int) -> Optional[int]:
    """A dead (zombie) process's wait status, from /proc/<pid>/stat's exit_code (Linux 3.5+)."""
    fields = _read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()
    return int(fields[-1]) if len(fields) >= 50 else None


def _exits(dead: tuple[int, ...]) -> str:
    """How the pool's dead workers ended (exit code, or the signal that killed them)."""
    said = []
    for kid in dead:
        status = _wait_status(kid)
        if status is None:
            continue
        signal_number, code = status & 0x7F, status >> 8  # signal in the low bits
        if signal_number == 9:
            said.append("killed by SIGKILL (out of memory, most likely)")
        elif signal_number:
            said.append(f"killed by signal {signal_number}")
        elif code:
            said.append(f"exited with code {code}")
    return ", ".join(dict.fromkeys(said))


def _import_error(python: str, environ: dict[str, str], cwd: str) -> str:
    """The error ``python`` gives importing what a worker needs ("" when it imports them)."""
    probe = "import apache_beam, beam_pipeline.watchdog"
    try:
        proc = subprocess.run(
            [python, "-c", probe],
            env=environ,
            cwd=cwd or None,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{type(e).__name__}: {e}"
    return "" if proc.returncode == 0 else _last_error(proc.stderr) or proc.stderr.strip()[-300:]


def _pool_pid(address: str) -> Optional[int]:
    """The worker pool process serving ``address`` on this machine, or None.

    Only a process whose command line names a worker pool (Beam's ``worker_pool_main``,
    ``beam_pipeline.worker_pool``) counts: a port forwarded into a container or through a
    tunnel is served by a process whose workers are not its children.
    """
    try:
        pid = _listening_pid(int(address.rsplit(":", 1)[1]))
    except (IndexError, ValueError):
        return None
    if pid is None or "worker_pool" not in _read(f"/proc/{pid}/cmdline"):
        return None
    return pid


def inspect_pool(address: str, check_python: bool = False) -> PoolReport:
    """What this machine can read about the worker pool at ``address`` (local only).

    Args:
      address: ``host:port`` of the pool.
      check_python: also run the pool's worker interpreter once to import apache_beam and
        this package (about a second), to name an import error that the log does not hold.
    """
    pid = _pool_pid(address)
    if pid is None:
        return PoolReport(address)
    alive, dead = _children(pid)
    log = ""
    for fd in (2, 1):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and os.path.isfile(target):
            log = target
            break
    said = _last_error(_tail(log)) if log else ""
    python, from_path, environ = _pool_python(pid)  # reads /proc only: cheap
    if python and check_python:
        said = _import_error(python, environ, _cwd(pid)) or said
    elif from_path and not python:
        said = "no `python` on the pool's PATH"
    ended = _exits(tuple(dead))
    fix = _fix(said, python, from_path, address)
    if not said and "SIGKILL" in ended:
        fix = (
            "give the workers more memory or make the step smaller (fewer trials at once, a "
            "smaller model or batch), then rerun with the same --run_id"
        )
    return PoolReport(address, pid, tuple(alive), tuple(dead), log, said, python, ended, fix)


def _cwd(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def _tail(path: str, size: int = 16384) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - size))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _fix(said: str, python: str, from_path: bool, address: str = "localhost:PORT") -> str:
    port = address.rsplit(":", 1)[-1]
    start = f"`.venv/bin/python -m beam_pipeline.worker_pool --service_port={port}`"
    if _NO_BEAM in said or said == "no `python` on the pool's PATH":
        where = f" ({python})" if python else ""
        if from_path:
            return (
                f"the worker pool runs `python` from PATH{where} without apache_beam; start "
                f"it with the environment's python or activate the venv (e.g. {start})"
            )
        return f"the pool's worker interpreter{where} has no apache_beam; start the pool as {start}"
    if "No module named" in said:
        return (
            "the pool's workers cannot import this project; `pip install .` into the pool's "
            f"environment or set PYTHONPATH to the repository, or start the pool as {start}"
        )
    return f"read the worker pool's log, fix the cause, or start the pool as {start}"


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


# ------------------------------------------------------------------ pre-flight


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
    address = _local_pool_address(options)
    if address is None:
        return False
    import grpc

    env = _describe_environment(options)
    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=min(timeout, 10.0))
    except grpc.FutureTimeoutError:
        raise PipelineError(
            f"The worker pool at {env} does not answer; start it first, e.g. "
            f"`.venv/bin/python -m beam_pipeline.worker_pool --service_port="
            f"{address.rsplit(':', 1)[-1]} &`, or pass the address it serves at."
        ) from None
    finally:
        channel.close()

    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.transforms import environments

    pool = _pool_pid(address)
    before = set(_children(pool)[1]) if pool else set()
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
        alive, dead = _children(pool) if pool else ([], [])
        failed = [kid for kid in set(dead) - before if _wait_status(kid) != 0]
        if failed and not alive:
            # The worker it started failed: no need to wait out the timeout (a healthy
            # probe's worker exits with 0 as its job ends; grace for such a job to end).
            job.join(timeout=_EXIT_GRACE_S)
            break
    if not job.is_alive() and probe.error is None:
        return True
    report = inspect_pool(address, check_python=True)
    if probe.error is not None:
        said = _last_error(str(probe.error)) or str(probe.error).strip()[-300:]
        fix = _fix(said, report.python, False, address)
        report = dataclasses.replace(report, said=said, fix=fix)
        what = "its worker failed the probe step"
    elif report.dead and not report.alive:
        what = "its worker exited at start"
    else:
        what = f"no worker of it started within {timeout:.0f} s (--worker_start_timeout)"
    said = f" ({report.said})" if report.said else ""
    log = f", log {report.log}" if report.log else ""
    raise PipelineError(
        f"The worker pool at {env} cannot run this project's steps: {what}{said}{log}; "
        f"{report.fix}."
    )


def start_worker_pool_check(
    options, timeout: float = DEFAULT_WORKER_START_TIMEOUT
) -> Callable[[], None]:
    """Runs :func:`check_worker_pool` in a daemon thread, so its worker start overlaps work.

    Returns:
      a function that waits for the check and raises its :class:`PipelineError`, if any.
    """
    if _local_pool_address(options) is None:
        return lambda: None
    check = BackgroundCall(
        lambda: check_worker_pool(options, timeout), "beam-worker-pool-check-start"
    )

    def join() -> None:
        check.thread.join()
        check.get()

    return join


# ------------------------------------------------------------------ the watchdog


class _Watched:
    """A ``PipelineResult`` whose ``wait_until_finish`` fails a job no worker serves."""

    def __init__(self, result, options, what: str, timeout: float) -> None:
        self._result = result
        self._options = options
        self._what = what
        self._timeout = timeout
        self._address = _local_pool_address(options)
        self._pid: Optional[int] = None
        self._seen_pool = False

    def __getattr__(self, name: str):
        return getattr(self._result, name)

    def _alive(self) -> bool:
        if self._address is not None:
            if self._pid is None or not os.path.exists(f"/proc/{self._pid}"):
                self._pid = _pool_pid(self._address)  # found again if the pool restarted
            if self._pid is not None:
                self._seen_pool = True
                return bool(_children(self._pid)[0])
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
        from beam_pipeline.remote import describe_job

        job = describe_job(self._result, self._options)
        env = _describe_environment(self._options)
        if self._address is not None:
            report = inspect_pool(self._address)
            if not report.said and "SIGKILL" not in report.ended:
                report = inspect_pool(self._address, check_python=True)  # about a second
            if report.pid is None:
                state = "its worker pool no longer answers"
            elif report.dead:
                state = (
                    f"its workers ended: {report.ended}" if report.ended else ("its workers exited")
                )
            else:
                state = "the pool started no worker for it"
            said = f" ({report.said})" if report.said else ""
            log = f", log {report.log}" if report.log else ""
            detail = f"{state}{said}{log}; {report.fix}"
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
