"""How long the commands that run no pipeline take: ``--help`` and ``runs list``.

They import only what they print (the stage declarations for ``--help``'s flags, the
metadata store for ``runs``), never Beam or TensorFlow; this times each as a whole process,
against another checkout of the project (the one before a change) in the same sitting,
alternating A B A B, and writes ``benchmarks/results/cli_start_<date>.json``.

Example::

    git worktree add /tmp/before <commit>
    .venv/bin/python benchmarks/bench_cli_start.py --before /tmp/before \
        --pipeline_root <a root with runs> --repeats 9
    # a newer store revision: the same runs for the older checkout
    ... --before_pipeline_root <a copy of that root before the newer version opened it>
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _time(checkout: str, args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``python -m beam_pipeline ARGS`` run from ``checkout``."""
    env = dict(os.environ, PYTHONPATH=checkout)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *args],
        env=env,
        cwd=checkout,
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{checkout}: {' '.join(args)} exited {proc.returncode}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="a checkout of the version to compare with")
    p.add_argument("--pipeline_root", required=True, help="a pipeline root with runs in it")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument(
        "--before_pipeline_root",
        default=None,
        help="the same runs in a store the older version reads (a store a newer version "
        "migrated is refused by an older one); default: --pipeline_root",
    )
    args = p.parse_args()
    roots = {
        REPO: os.path.abspath(args.pipeline_root),
        args.before: os.path.abspath(args.before_pipeline_root or args.pipeline_root),
    }
    commands = {
        "--help": lambda checkout: ["--help"],
        "runs list": lambda checkout: ["runs", "list", f"--pipeline_root={roots[checkout]}"],
    }
    results = {}
    for name, argv in commands.items():
        for checkout in (REPO, args.before):  # warm-up: the file cache, the .pyc files
            _time(checkout, argv(checkout))
        runs: dict[str, list[tuple[float, float]]] = {"after": [], "before": []}
        for _ in range(args.repeats):
            runs["after"].append(_time(REPO, argv(REPO)))
            runs["before"].append(_time(args.before, argv(args.before)))
        results[name] = {
            version: {
                "wall_s_median": round(statistics.median(w for w, _ in r), 4),
                "cpu_s_median": round(statistics.median(c for _, c in r), 4),
                "wall_s": [round(w, 4) for w, _ in r],
            }
            for version, r in runs.items()
        }
        ratios = [a[0] / b[0] for a, b in zip(runs["after"], runs["before"])]
        results[name]["after_over_before_wall_median"] = round(statistics.median(ratios), 3)
    now = datetime.datetime.now(datetime.timezone.utc)
    out = {
        "benchmark": "cli_start",
        "date": now.isoformat(timespec="seconds"),
        "machine": {
            "nproc": os.cpu_count(),
            "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "loadavg": list(os.getloadavg()),
        },
        "before": os.path.abspath(args.before),
        "pipeline_roots": {"after": roots[REPO], "before": roots[args.before]},
        "repeats": args.repeats,
        "results": results,
    }
    path = os.path.join(HERE, "results", f"cli_start_{now.strftime('%Y%m%d-%H%M')}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(json.dumps(results, indent=2))
    print(path)


if __name__ == "__main__":
    main()
