"""Which process launched a run, and whether it is gone: a killed run's record says
``running`` until it is resumed, and ``runs list`` should not say so of a dead launcher.

A run records its launcher as ``{"host", "pid", "start"}`` (``start``: the process's start
time in clock ticks since boot, from ``/proc/<pid>/stat``, so that a reused pid is not
taken for the launcher). Only a launcher on this host can be checked; elsewhere the record
stands as it is. Hand-written: psutil would do it on more systems, but is not in this
stack's lock, and Linux is what the runs here are launched from.

Example::

    properties["launcher"] = this_launcher()
    launcher_gone(run.properties.get("launcher"))   # True: killed; None: cannot tell
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any, Optional

__all__ = ["launcher_gone", "this_launcher"]


def _start_ticks(pid: int) -> Optional[int]:
    """The process's start time (field 22 of ``/proc/<pid>/stat``), None if no such one."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def this_launcher() -> dict[str, Any]:
    """This process as a run's launcher."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "start": _start_ticks(os.getpid())}


def launcher_gone(launcher: Optional[Mapping[str, Any]]) -> Optional[bool]:
    """Whether the recorded launcher has exited: None when that cannot be told here
    (another host, no ``/proc``, a run recorded before launchers were)."""
    if not launcher or launcher.get("host") != socket.gethostname():
        return None
    if launcher.get("start") is None or not os.path.isdir("/proc/self"):
        return None
    return _start_ticks(int(launcher["pid"])) != launcher["start"]
