"""Runs one command and measures it: wall time, peak memory of its whole process tree,
CPU it used and how busy the rest of the machine was meanwhile.

Only the standard library and /proc (Linux), so the same code measures a run of this
repo's CLI and a run of the TFX anchor (another venv, another Python).

Memory, four figures (MiB):
  peak_tree_rss_mib: the largest sum, over one sample, of the RSS of every process in the
    command's session (the command, its Beam worker processes, anything they start).
    Sampled every ``interval`` seconds. Pages shared between processes (libraries, forked
    memory) count once per process, so this overstates a multi-process tree: an upper
    bound. For a single process it is exact.
  peak_tree_uss_mib: the same with USS (pages private to each process): a lower bound,
    missing shared libraries. Sampled every ``pss_every`` samples (smaps_rollup costs
    more to read).
  peak_tree_pss_mib: the same with PSS (each shared page split between the processes
    sharing it), sampled with USS. In between, but it also splits pages shared with
    processes outside the tree (another Python of the same venv running meanwhile lowers
    it), so it depends on what else runs; prefer RSS and USS for comparisons.
  max_process_rss_mib: the largest RSS any single process reached (the kernel's own
    high-water mark, ``ru_maxrss`` of the waited-for tree; what ``/usr/bin/time -v``
    reports as "Maximum resident set size").

Machine load: ``loadavg_before`` / ``loadavg_after``; ``busy_cpu_s``, the whole machine's
busy CPU seconds over the run (/proc/stat); ``cpu_s``, the measured tree's CPU seconds;
``other_cpu_s``, the CPU seconds every other process took meanwhile (sampled from
/proc/PID/stat with the memory, the sampler itself excluded and reported as
``sampler_cpu_s``). ``other_cpu_share_of_one_core`` = other_cpu_s / wall_s: near 0 means a
quiet machine; near the core count means the run had to share every core.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Optional

_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICK = os.sysconf("SC_CLK_TCK")
_MIB = 1024 * 1024


def _all_cpu(sid: int) -> tuple[dict[int, float], dict[int, float]]:
    """CPU seconds so far (user + system, each process's own) of every process:
    ({pid: s} of session ``sid``, {pid: s} of all other processes)."""
    mine, others = {}, {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # Fields counted after the ")" that ends the command name: session is field 6,
        # utime and stime fields 14 and 15.
        fields = stat[stat.rfind(b")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / _TICK
        (mine if int(fields[3]) == sid else others)[int(name)] = cpu
    return mine, others


def _session_pids(sid: int) -> list[int]:
    return list(_all_cpu(sid)[0])


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def _pss_uss_bytes(pid: int) -> tuple[int, int]:
    pss = uss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith((b"Private_Clean:", b"Private_Dirty:")):
                    uss += int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return pss, uss


def _busy_cpu_s() -> float:
    """Busy CPU seconds of the whole machine since boot (all cores)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal ...; busy = all but idle and iowait.
    return (sum(v[:8]) - v[3] - v[4]) / _TICK


def _ncpu() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def machine_info() -> dict:
    """Facts about the machine worth keeping beside a timing."""
    info = {"ncpu": _ncpu(), "loadavg": [round(x, 2) for x in os.getloadavg()]}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(("MemTotal:", "MemAvailable:")):
                    k, v = line.split(":")
                    info[k.strip().lower() + "_mib"] = int(v.split()[0]) // 1024
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def run_measured(
    cmd: Sequence[str],
    *,
    log_path: str,
    env: Optional[dict] = None,
    cwd: Optional[str] = None,
    timeout_s: Optional[float] = None,
    interval: float = 0.2,
    pss_every: int = 5,
    timeline_points: int = 200,
) -> dict:
    """Runs ``cmd`` in a new session, output to ``log_path``; returns the measurements.

    The command's session is sampled every ``interval`` seconds. On timeout the whole
    session (this command's own process group) is killed and ``timed_out`` is set.
    """
    load_before = [round(x, 2) for x in os.getloadavg()]
    busy0 = _busy_cpu_s()
    with open(log_path, "wb") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            list(cmd),
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    sid = proc.pid  # session leader: its pid is the session id
    peak_rss = peak_pss = peak_uss = 0
    max_procs = 0
    samples: list[tuple[float, int, int]] = []  # (t, rss bytes, process count)
    n = 0
    cpu_seen: dict[int, float] = {}  # session pid -> last CPU seconds seen
    others_first: dict[int, float] = {}  # other pid -> CPU seconds when first seen
    others_last: dict[int, float] = {}
    me = os.getpid()
    timed_out = False
    status = rusage = None
    while True:
        wpid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if wpid == proc.pid:
            break
        now = time.monotonic() - t0
        pids, others = _all_cpu(sid)
        cpu_seen.update(pids)
        for p, c in others.items():
            # A process first seen after the first sample started during the run.
            others_first.setdefault(p, c if n == 0 else 0.0)
        others_last.update(others)
        rss = sum(_rss_bytes(p) for p in pids)
        peak_rss = max(peak_rss, rss)
        max_procs = max(max_procs, len(pids))
        if n % pss_every == 0:
            pu = [_pss_uss_bytes(p) for p in pids]
            peak_pss = max(peak_pss, sum(p for p, _ in pu))
            peak_uss = max(peak_uss, sum(u for _, u in pu))
        samples.append((now, rss, len(pids)))
        n += 1
        if timeout_s is not None and now > timeout_s:
            timed_out = True
            os.killpg(sid, signal.SIGKILL)
            _, status, rusage = os.wait4(proc.pid, 0)
            break
        time.sleep(interval)
    wall = time.monotonic() - t0
    busy = _busy_cpu_s() - busy0
    sampler_cpu = others_last.get(me, 0.0) - others_first.get(me, 0.0)
    other_cpu = sum(others_last[p] - others_first[p] for p in others_last if p != me)
    # Beam workers the command did not wait for (rare) would still hold the session.
    leftovers = [p for p in _session_pids(sid) if p != proc.pid]
    if leftovers:
        try:
            os.killpg(sid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    rc = os.waitstatus_to_exitcode(status)
    # wait4 misses the CPU of processes the command did not wait for (Beam's SDK workers
    # can be among them); the sampled sum misses each process's last fraction of a
    # sample. Both fall short, so the larger is the better figure.
    tree_cpu = max(rusage.ru_utime + rusage.ru_stime, sum(cpu_seen.values()))
    return {
        "cmd": list(cmd),
        "rc": rc,
        "timed_out": timed_out,
        "wall_s": round(wall, 2),
        "peak_tree_rss_mib": round(peak_rss / _MIB, 1),
        "peak_tree_pss_mib": round(peak_pss / _MIB, 1),
        "peak_tree_uss_mib": round(peak_uss / _MIB, 1),
        "max_process_rss_mib": round(rusage.ru_maxrss / 1024, 1),
        "max_processes": max_procs,
        "samples": len(samples),
        "sample_interval_s": interval,
        "cpu_s": round(tree_cpu, 1),
        "cpu_s_wait4": round(rusage.ru_utime + rusage.ru_stime, 1),
        "machine": {
            **machine_info(),
            "loadavg_before": load_before,
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
            "busy_cpu_s": round(busy, 1),
            "other_cpu_s": round(other_cpu, 1),
            "other_cpu_share_of_one_core": round(other_cpu / wall, 2) if wall else 0.0,
            "sampler_cpu_s": round(sampler_cpu, 1),
        },
        "leftover_processes_killed": len(leftovers),
        "rss_timeline_mib": _downsample(samples, timeline_points),
    }


def _downsample(samples: list[tuple[float, int, int]], points: int) -> list[list[float]]:
    """At most ``points`` (t, max tree RSS MiB in the bucket) pairs, to keep files small."""
    if not samples:
        return []
    end = samples[-1][0] or 1.0
    width = end / points
    buckets: dict[int, tuple[float, int]] = {}
    for t, rss, _ in samples:
        b = min(int(t / width), points - 1)
        if b not in buckets or rss > buckets[b][1]:
            buckets[b] = (t, rss)
    return [[round(t, 1), round(rss / _MIB)] for t, rss in (buckets[b] for b in sorted(buckets))]


def run_from_checkout(
    checkout: str, args: Sequence[str], env: Optional[dict] = None
) -> tuple[subprocess.CompletedProcess, float, float]:
    """``python -m beam_pipeline ARGS`` with ``checkout``'s code (its tree first on the
    path, run from it): the finished process, its wall seconds and the CPU seconds of
    every process it waited for (``RUSAGE_CHILDREN``)."""
    env = dict(os.environ if env is None else env, PYTHONPATH=checkout)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *args],
        env=env,
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc, wall, cpu
