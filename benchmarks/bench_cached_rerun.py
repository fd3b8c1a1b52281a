"""The bundled run's first run and its reruns into the same pipeline root (every stage
reused), against another checkout of the project (the one before a change), in the same
sitting, alternating before / after, a fresh pipeline root per sitting and version.

Each run is ``python -m beam_pipeline --runner=DirectRunner`` plus ``--args`` (by default
none: the bundled pipeline with its tuning), from the checkout's own tree, a new run id
each time. Recorded per run: the whole process's wall and CPU time, the machine's 1-minute
load average before it (the machine is shared), and how many stages were reused; written
to ``benchmarks/results/cached_rerun_2cores_<date>.json``.

Example::

    git worktree add /tmp/before <commit>
    .venv/bin/python benchmarks/bench_cached_rerun.py --before /tmp/before --sittings 3
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shlex
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _measure import run_from_checkout  # noqa: E402
from bench_bundled_run import _commit  # noqa: E402

REPO = os.path.dirname(HERE)


def _run(checkout: str, args: list[str], root: str) -> dict:
    """One run from ``checkout`` into ``root``: wall, CPU, load before, stages reused."""
    load = os.getloadavg()[0]
    proc, wall, cpu = run_from_checkout(
        checkout, ["--runner=DirectRunner", *args, f"--pipeline_root={root}", "--no_progress"]
    )
    if proc.returncode != 0:
        raise SystemExit(f"{checkout}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    newest = max(glob.glob(os.path.join(root, "runs", "*", "summary.json")), key=os.path.getmtime)
    with open(newest) as f:
        rows = json.load(f)["stages"]
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "load_average_1min_before": round(load, 2),
        "stages_cached": sum(r["status"] == "cached" for r in rows),
        "stages": len(rows),
    }


def _median(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="a checkout of the version to compare with")
    p.add_argument("--sittings", type=int, default=3)
    p.add_argument("--reruns", type=int, default=2, help="reruns after each first run")
    p.add_argument("--args", default="", help="the run's flags besides the runner")
    args = p.parse_args()
    flags = shlex.split(args.args)
    first: dict[str, list[dict]] = {"before": [], "after": []}
    rerun: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="bench_cached_rerun_") as work:
        for i in range(args.sittings):
            for version, checkout in (("before", args.before), ("after", REPO)):
                root = os.path.join(work, f"{version}-{i}")
                first[version].append(_run(checkout, flags, root))
                print(version, "first", first[version][-1], flush=True)
                for _ in range(args.reruns):
                    rerun[version].append(_run(checkout, flags, root))
                    print(version, "rerun", rerun[version][-1], flush=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    loads = [r["load_average_1min_before"] for rs in (*first.values(), *rerun.values()) for r in rs]
    out = {
        "benchmark": "cached_rerun",
        "date": now.isoformat(timespec="seconds"),
        "machine": {
            "nproc": os.cpu_count(),
            "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
            "shared": "three engineers' work on 2 cores; see each run's load average",
            "load_average_1min_range": [min(loads), max(loads)],
        },
        "command": (
            f"python -m beam_pipeline --runner=DirectRunner {args.args} --pipeline_root=ROOT "
            "--no_progress: a first run, then reruns into the same ROOT"
        ),
        "reproduce": (
            f"python benchmarks/bench_cached_rerun.py --before <checkout> "
            f"--sittings {args.sittings} --reruns {args.reruns}"
        ),
        "before": _commit(args.before),
        "after": _commit(REPO),
        "order": "sittings; in each: before (first run, reruns), then after; a fresh root each",
        "first_run": first,
        "rerun": rerun,
        "first_run_wall_s_median": {v: _median(rs, "wall_s") for v, rs in first.items()},
        "rerun_wall_s_median": {v: _median(rs, "wall_s") for v, rs in rerun.items()},
        "rerun_cpu_s_median": {v: _median(rs, "cpu_s") for v, rs in rerun.items()},
        "first_run_cpu_s_median": {v: _median(rs, "cpu_s") for v, rs in first.items()},
    }
    stamp = now.strftime("%Y%m%d-%H%M")
    path = os.path.join(HERE, "results", f"cached_rerun_2cores_{stamp}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    keys = ("first_run_wall_s_median", "rerun_wall_s_median", "rerun_cpu_s_median")
    print(json.dumps({k: out[k] for k in keys}))
    print(path)


if __name__ == "__main__":
    main()
