"""The bundled run on the portable runner, timed: before/after comparisons of the launcher.

Starts a worker pool (``beam_pipeline.runtime.worker_pool`` or Beam's stock ``worker_pool_main``)
for a source tree, runs ``python -m beam_pipeline --runner=PortableRunner
--job_endpoint=embed --environment_type=EXTERNAL`` on the bundled data and module from that
tree, and prints one JSON line: the wall time, each stage's seconds from the run's
summary.json, and the pool kind. The pool is started afresh for each run and given
``--warm_s`` seconds first (as a user starts it before the run). Comparing two versions of
the code: check the older one out beside this one (``git worktree add /tmp/before REV``) and
alternate runs of the two in one sitting (``--tree``), on a quiet machine.

Example::

    .venv/bin/python benchmarks/bench_portable.py --runs 2
    git worktree add /tmp/before a3e99b7^
    for i in 1 2; do
      .venv/bin/python benchmarks/bench_portable.py --tree /tmp/before --pool stock
      .venv/bin/python benchmarks/bench_portable.py
    done
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POOLS = {
    "own": "beam_pipeline.runtime.worker_pool",
    "stock": "apache_beam.runners.worker.worker_pool_main",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("localhost", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"the worker pool did not listen on port {port} within {timeout} s")


def run_once(tree: str, pool: str, warm_s: float, extra: list[str]) -> dict:
    """One pool and one bundled portable run from ``tree``; what it measured."""
    port = _free_port()
    work = tempfile.mkdtemp(prefix="bench_portable_")
    # The tree's packages first on the path; the venv's python (and its bin on PATH, which
    # Beam's stock pool needs to start its workers) for everything else.
    env = dict(
        os.environ,
        PYTHONPATH=tree,
        TF_CPP_MIN_LOG_LEVEL="2",
        PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]),
    )
    log = open(os.path.join(work, "pool.log"), "w")
    pool_proc = subprocess.Popen(
        [sys.executable, "-m", POOLS[pool], f"--service_port={port}"],
        cwd=tree,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for_port(port)
        time.sleep(warm_s)
        root = os.path.join(work, "root")
        argv = [
            sys.executable,
            "-m",
            "beam_pipeline",
            "--runner=PortableRunner",
            "--job_endpoint=embed",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{port}",
            f"--pipeline_root={root}",
            "--run_id=bench",
            *extra,
        ]
        start = time.monotonic()
        proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            raise SystemExit(f"the run failed ({proc.returncode}): {proc.stderr[-2000:]}")
        with open(os.path.join(root, "runs", "bench", "summary.json")) as f:
            stages = {s["stage"]: round(s["seconds"], 1) for s in json.load(f)["stages"]}
        return {
            "tree": os.path.relpath(tree, REPO) if tree.startswith(REPO) else tree,
            "pool": pool,
            "wall_s": round(wall, 1),
            "stages_s": round(sum(stages.values()), 1),
            "stages": stages,
            "load_before": open("/proc/loadavg").read().split()[0],
        }
    finally:
        pool_proc.terminate()
        pool_proc.wait(timeout=30)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", default=REPO, help="source tree to run (default: this one)")
    parser.add_argument("--pool", choices=sorted(POOLS), default="own")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--warm_s", type=float, default=10.0, help="pool start to run start")
    parser.add_argument(
        "--extra",
        default="",
        help="more flags for the run, e.g. '--no_evaluator --no_infra_validator' to run the "
        "stages an older version has",
    )
    args = parser.parse_args()
    for _ in range(args.runs):
        result = run_once(os.path.abspath(args.tree), args.pool, args.warm_s, args.extra.split())
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
