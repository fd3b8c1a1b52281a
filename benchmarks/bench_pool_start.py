"""How long the local worker pool takes to get ready, and what its idle processes hold.

``LocalWorkerPool(N)`` (the Tuner's pool on the DirectRunner) forks its processes from one
server that imported the ML stack. This starts a pool of ``--workers`` processes twice in
one launcher (the first start also starts the fork server; the second finds it running),
and, as the control, the same number of fresh interpreters doing what a pool process did
before it was a fork (``trainer.process.prewarm()`` plus the Beam worker-pool import).

Figures per start: seconds until every process serves (or finished its imports), the
processes' own CPU seconds (a fork's CPU does not include the server's imports; the
first start's wall time does), and their mean USS (private memory, MiB; a fork shares the
imported pages with the server until it writes them).

Example::

    .venv/bin/python benchmarks/bench_pool_start.py --workers 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

_FRESH = (
    "import sys; from trainer.process import limit_threads, prewarm; limit_threads(1); "
    "prewarm(); "
    "from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer; "
    "import transforms.trainer, transforms.transform, transforms.tuner; "
    "sys.stdout.write('ready\\n'); sys.stdout.flush(); sys.stdin.read()"
)


def _uss_mib(pid: int) -> float:
    kib = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean", "Private_Dirty")):
                kib += int(line.split()[1])
    return kib / 1024


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _figures(label: str, seconds: float, pids: list[int]) -> dict:
    row = {
        "start": label,
        "ready_s": round(seconds, 2),
        "cpu_s": round(sum(_cpu_s(p) for p in pids), 2),
        "uss_mib_per_process": round(sum(_uss_mib(p) for p in pids) / len(pids), 1),
    }
    print(json.dumps(row))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    from beam_pipeline.runtime.pool import LocalWorkerPool

    rows = []
    for label in ("pool, first start", "pool, second start"):
        t = time.time()
        with LocalWorkerPool(args.workers, threads_per_worker=1) as pool:
            pool.wait_ready()
            rows.append(_figures(label, time.time() - t, pool.pids))
    t = time.time()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    fresh = [
        subprocess.Popen(
            [sys.executable, "-c", _FRESH],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )
        for _ in range(args.workers)
    ]
    for p in fresh:
        assert p.stdout.readline().strip() == "ready"
    rows.append(_figures("fresh interpreters (control)", time.time() - t, [p.pid for p in fresh]))
    for p in fresh:
        p.stdin.close()
        p.wait()
    print(
        f"\n| {args.workers} processes on {os.cpu_count()} cores | ready s | CPU s | USS MiB each |"
    )
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['start']} | {r['ready_s']} | {r['cpu_s']} | {r['uss_mib_per_process']} |")


if __name__ == "__main__":
    main()
