"""Where the test suite's CPU goes: the suite run once, every process's CPU time by kind.

The suite is CPU-bound on 2 cores (``/proc/stat`` over a minute of a run: 119 of 120
core-seconds busy), so its wall time is its CPU time over 2, and cutting it means cutting
CPU. ``time -v`` does not tell where that goes: it counts only the children that were
waited for, and pool processes are reaped by fork servers, not by pytest. This script
samples ``/proc/<pid>/stat`` of every process on the machine twice a second while
``python -m pytest ARGS`` runs and sums each process's last-seen user+system time by kind
(its command line: pytest-xdist workers, the DirectRunner pool's fork server and its
forks, Beam's ``sdk_worker_main`` processes, fresh ``python -c`` test scripts, CLI runs,
kernel threads, ...). A process that lives less than half a second may be missed; the
kernel's own threads are counted because they compete for the same cores. Linux only.

Example::

    .venv/bin/python benchmarks/suite_cpu.py                 # the whole suite
    .venv/bin/python benchmarks/suite_cpu.py -- tests/test_tuner.py -n 0

It prints one row per kind (CPU-s, processes) and the total, and writes them with the
wall time to ``benchmarks/results/suite_cpu_<time>.json``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HZ = os.sysconf("SC_CLK_TCK")

# (kind, test on the command line) in order: the first that matches names the process.
_KINDS = (
    ("DirectRunner pool: fork server and its forks", "multiprocessing.forkserver"),
    ("Beam sdk_worker_main (fresh interpreter per worker)", "sdk_worker_main"),
    ("beam_pipeline.runtime.worker_pool: zygote and its workers", "socket.recv_fds"),
    ("beam_pipeline.runtime.worker_pool: the service", "beam_pipeline.runtime.worker_pool"),
    ("pytest-xdist workers (tests run in-process)", "exec(eval(sys.stdin.readline()))"),
    ("pytest", "-m pytest"),
    ("CLI runs (python -m beam_pipeline)", "-m beam_pipeline"),
    ("serving sandbox", "infra_validator/sandbox.py"),
    ("TF Serving stand-in", "tf_serving_standin.py"),
    ("other python -c scripts (fresh interpreters)", " -c "),
)


def _kind(cmdline: str, comm: str) -> str:
    if not cmdline:
        return "kernel: " + ("kdamond" if comm.startswith("kdamond") else "other threads")
    for kind, needle in _KINDS:
        if needle in cmdline:
            return kind
    return "other: " + os.path.basename(cmdline.split(" ", 1)[0])


def _sample(seen: dict, stop: threading.Event, me: int) -> None:
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ticks, start = int(fields[11]) + int(fields[12]), fields[19]
                key = (pid, start)
                if key in seen:
                    seen[key][2] = ticks
                    continue
                ppid = fields[1]
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
                # Ticks already spent before the run started are not the suite's.
                base = ticks if not seen.get("started") else 0
                seen[key] = [cmdline, comm, ticks, base, pid, ppid]
            except (OSError, IndexError, ValueError):
                continue
        seen["started"] = True
        stop.wait(0.5)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest")
    args = parser.parse_args(argv)
    seen: dict = {}
    stop = threading.Event()
    sampler = threading.Thread(target=_sample, args=(seen, stop, os.getpid()), daemon=True)
    sampler.start()
    while "started" not in seen:
        time.sleep(0.05)
    t0 = time.time()
    code = subprocess.call([sys.executable, "-m", "pytest", *args.pytest_args], cwd=REPO)
    wall = time.time() - t0
    stop.set()
    sampler.join()
    seen.pop("started")
    by_kind: collections.Counter = collections.Counter()
    count: collections.Counter = collections.Counter()
    by_pid = {v[4]: v for v in seen.values()}
    for cmdline, comm, ticks, base, _pid, ppid in seen.values():
        seconds = (ticks - base) / _HZ
        if seconds > 0:
            kind = _kind(cmdline, comm)
            parent = by_pid.get(ppid)
            if kind == _KINDS[0][0] and (parent is None or parent[0] != cmdline):
                # The server itself (its imports), told from its forks by its parent: the
                # process that started it (a CLI run, a test process, a script).
                kind += ": the servers themselves, started by " + (
                    _kind(parent[0], parent[1]) if parent else "?"
                )
            by_kind[kind] += seconds
            count[kind] += 1
    total = sum(by_kind.values())
    print(f"\nwall {wall:.0f} s; CPU {total:.0f} s over {os.cpu_count()} cores; pytest exit {code}")
    for kind, seconds in by_kind.most_common():
        print(f"{seconds:8.1f} s {count[kind]:5d} processes  {kind}")
    out_dir = os.path.join(REPO, "benchmarks", "results")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, time.strftime("suite_cpu_%Y%m%d-%H%M%S.json"))
    with open(path, "w") as f:
        json.dump(
            {
                "pytest_args": args.pytest_args,
                "exit": code,
                "wall_s": round(wall, 1),
                "cpu_s": round(total, 1),
                "cores": os.cpu_count(),
                "by_kind": {k: [round(v, 1), count[k]] for k, v in by_kind.most_common()},
            },
            f,
            indent=1,
        )
    print(f"written: {os.path.relpath(path, REPO)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
