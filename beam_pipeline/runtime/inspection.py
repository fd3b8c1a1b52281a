"""What this machine can tell about a job's workers: the options' environment, a local pool's state.

A job's environment comes from its options (``--environment_type`` / ``_config``,
Dataflow's ``--sdk_container_image``). A worker pool serving EXTERNAL workers at an address
of this machine is found by its listening port and read through ``/proc`` (Linux): its
live and dead worker processes, how the dead ones ended, its log's last error line, the
interpreter its workers run and whether that imports Apache Beam and this project. The
pre-flight check (:mod:`~beam_pipeline.runtime.preflight`) and the watchdog
(:mod:`~beam_pipeline.runtime.watchdog`) word their errors from it. Hand-written: Beam has
no such view. Where ``/proc`` cannot be read, the state says less, never something wrong.

Example::

    seen = inspect_pool("localhost:50000", check_python=True)
    seen.dead, seen.ended, seen.said, seen.fix
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from typing import Optional

from beam_pipeline.runtime.beam_flags import option

__all__ = [
    "SPARE_NAME",
    "ZYGOTE_NAME",
    "PoolState",
    "describe_environment",
    "environment_of",
    "fix_for",
    "inspect_pool",
    "last_error_line",
    "local_pool_address",
    "pool_children",
    "pool_pid",
    "wait_status",
]

# /proc/<pid>/comm of a spare worker of beam_pipeline.runtime.worker_pool waiting for a job (at most
# 15 bytes, the kernel's TASK_COMM_LEN): a pool child of that name is no worker yet, so it
# neither keeps a job alive nor counts as a worker that ended.
SPARE_NAME = "bp-spare"
# /proc/<pid>/comm of beam_pipeline.runtime.worker_pool's zygote: the pool's child that has imported
# the ML stack once and forks the workers; it serves no job, so it is no worker either.
ZYGOTE_NAME = "bp-zygote"

_STOCK_POOL = "apache_beam.runners.worker.worker_pool_main"
_OWN_POOL = "beam_pipeline.runtime.worker_pool"
_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*$")
_NO_BEAM = "No module named 'apache_beam'"


def environment_of(options) -> tuple[str, str]:
    """``(environment type, config)`` of a portable job, the type upper-cased (DOCKER by default).

    Dataflow's image comes from ``--sdk_container_image``.
    """
    kind = (option(options, "PortableOptions", "environment_type") or "DOCKER").upper()
    kind = kind.removeprefix("BEAM:ENV:").removesuffix(":V1")
    config = option(options, "PortableOptions", "environment_config") or ""
    image = option(options, "WorkerOptions", "sdk_container_image")
    if kind == "DOCKER" and not config and image:
        config = image
    return kind, config


def local_pool_address(options) -> Optional[str]:
    """The EXTERNAL pool's address when the pool and the runner are on this machine."""
    from beam_pipeline.runtime.runners import remote_runner_reason

    kind, config = environment_of(options)
    if kind != "EXTERNAL" or not config or remote_runner_reason(options) is not None:
        return None
    return config


def describe_environment(options) -> str:
    """The workers' environment as a message names it (the image, or the EXTERNAL pool)."""
    from apache_beam.options import pipeline_options as po

    kind, config = environment_of(options)
    runner = str(options.view_as(po.StandardOptions).runner or "")
    if "dataflow" in runner.lower():
        return f"the worker image {config or '(Dataflow default)'} (--sdk_container_image)"
    if kind == "DOCKER":
        return f"the worker image {config or '(Beam default)'} (--environment_type=DOCKER)"
    return f"--environment_type={kind} --environment_config={config}"


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


def pool_children(pid: int) -> tuple[list[int], list[int]]:
    """``(alive, dead)`` worker processes of pool ``pid`` (dead: exited, not yet reaped).

    Spare workers waiting for a job (named :data:`SPARE_NAME`) and the pool's zygote
    (:data:`ZYGOTE_NAME`) are left out: they serve none. The pool's workers are its children
    even when its zygote forked them: the pool adopts them (``PR_SET_CHILD_SUBREAPER``).
    """
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            kids += [int(k) for k in _read(f"/proc/{pid}/task/{task}/children").split()]
    except OSError:
        return [], []
    alive, dead = [], []
    for kid in kids:
        if _read(f"/proc/{kid}/comm").strip() in (SPARE_NAME, ZYGOTE_NAME):
            continue
        stat = _read(f"/proc/{kid}/stat")
        state = stat.rsplit(")", 1)[-1].split()[:1]
        (dead if not state or state[0] in ("Z", "X") else alive).append(kid)
    return alive, dead


@dataclasses.dataclass(frozen=True)
class PoolState:
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


def last_error_line(text: str) -> str:
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


def wait_status(pid: int) -> Optional[int]:
    """A dead (zombie) process's wait status, from /proc/<pid>/stat's exit_code (Linux 3.5+)."""
    fields = _read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()
    return int(fields[-1]) if len(fields) >= 50 else None


def _exits(dead: tuple[int, ...]) -> str:
    """How the pool's dead workers ended (exit code, or the signal that killed them)."""
    said = []
    for kid in dead:
        status = wait_status(kid)
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
    probe = "import apache_beam, beam_pipeline.runtime.inspection"
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
    return (
        "" if proc.returncode == 0 else last_error_line(proc.stderr) or proc.stderr.strip()[-300:]
    )


def pool_pid(address: str) -> Optional[int]:
    """The worker pool process serving ``address`` on this machine, or None.

    Only a process whose command line names a worker pool (Beam's ``worker_pool_main``,
    ``beam_pipeline.runtime.worker_pool``) counts: a port forwarded into a container or through a
    tunnel is served by a process whose workers are not its children.
    """
    try:
        pid = _listening_pid(int(address.rsplit(":", 1)[1]))
    except (IndexError, ValueError):
        return None
    if pid is None or "worker_pool" not in _read(f"/proc/{pid}/cmdline"):
        return None
    return pid


def inspect_pool(address: str, check_python: bool = False) -> PoolState:
    """What this machine can read about the worker pool at ``address`` (local only).

    Args:
      address: ``host:port`` of the pool.
      check_python: also run the pool's worker interpreter once to import apache_beam and
        this package (about a second), to name an import error that the log does not hold.
    """
    pid = pool_pid(address)
    if pid is None:
        return PoolState(address)
    alive, dead = pool_children(pid)
    log = ""
    for fd in (2, 1):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and os.path.isfile(target):
            log = target
            break
    said = last_error_line(_tail(log)) if log else ""
    python, from_path, environ = _pool_python(pid)  # reads /proc only: cheap
    if python and check_python:
        said = _import_error(python, environ, _cwd(pid)) or said
    elif from_path and not python:
        said = "no `python` on the pool's PATH"
    ended = _exits(tuple(dead))
    fix = fix_for(said, python, from_path, address)
    if not said and "SIGKILL" in ended:
        fix = (
            "give the workers more memory or make the step smaller (fewer trials at once, a "
            "smaller model or batch), then rerun with the same --run_id"
        )
    return PoolState(address, pid, tuple(alive), tuple(dead), log, said, python, ended, fix)


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


def fix_for(said: str, python: str, from_path: bool, address: str = "localhost:PORT") -> str:
    port = address.rsplit(":", 1)[-1]
    start = f"`.venv/bin/python -m beam_pipeline.runtime.worker_pool --service_port={port}`"
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
