"""The bundled run's wall time against another checkout of the project (the one before a
change), in the same sitting, alternating A B A B, each in a fresh pipeline root.

Each run is ``python -m beam_pipeline --runner=DirectRunner`` plus ``--args`` (by default
a short training without tuning; ``--args=""`` for the bundled pipeline with its tuning),
from the checkout's own tree. Recorded per run: the whole process's wall time, the CPU
time of every process of the run (``cpu_s``: the launcher, the fork server and its forks,
the InfraValidator's sandbox, Beam's workers, sampled from /proc by
:func:`_measure.run_measured`; ``cpu_s_waited``: the part the launcher waited for, which
misses the fork server's tree), the load average before it, and each stage's time from
the run's ``summary.json``; written to ``benchmarks/results/<--result_name>_<date>.json``
(``bundled_run`` by default).

Example::

    git worktree add /tmp/before <commit>
    .venv/bin/python benchmarks/bench_bundled_run.py --before /tmp/before --repeats 2
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _measure import run_measured  # noqa: E402

REPO = os.path.dirname(HERE)
DEFAULT_ARGS = "--train_steps=20 --eval_steps=5 --no_tuner"


def _run(checkout: str, args: list[str], root: str) -> dict:
    """One bundled run from ``checkout`` into ``root``: wall, CPU, stage times."""
    cmd = [sys.executable, "-m", "beam_pipeline", "--runner=DirectRunner", *args]
    cmd += [f"--pipeline_root={root}", "--run_id=bench", "--no_progress"]
    log = os.path.join(os.path.dirname(root), os.path.basename(root) + ".log")
    env = dict(os.environ, PYTHONPATH=checkout)
    measured = run_measured(cmd, log_path=log, env=env, cwd=checkout)
    if measured["rc"] != 0:
        with open(log, errors="replace") as f:
            raise SystemExit(f"{checkout}: exit {measured['rc']}\n{f.read()[-3000:]}")
    with open(os.path.join(root, "runs", "bench", "summary.json")) as f:
        rows = json.load(f)["stages"]
    return {
        "wall_s": measured["wall_s"],
        "cpu_s": measured["cpu_s"],
        "cpu_s_waited": measured["cpu_s_wait4"],
        "load_average_1min_before": measured["machine"]["loadavg_before"][0],
        "other_cpu_share_of_one_core": measured["machine"]["other_cpu_share_of_one_core"],
        "stage_s": {r["stage"]: r.get("seconds", 0.0) for r in rows},
    }


def _commit(checkout: str) -> str:
    """The checkout's commit (with ``+changes`` when its tree differs from it)."""
    head = subprocess.run(
        ["git", "-C", checkout, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", checkout, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{head or os.path.abspath(checkout)}{' +changes' if dirty else ''}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="a checkout of the version to compare with")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--args", default=DEFAULT_ARGS, help="the run's flags besides the runner")
    p.add_argument("--result_name", default="bundled_run", help="the results file's name")
    args = p.parse_args()
    flags = shlex.split(args.args)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="bench_bundled_") as work:
        for i in range(args.repeats):
            for version, checkout in (("before", args.before), ("after", REPO)):
                root = os.path.join(work, f"{version}-{i}")
                runs[version].append(_run(checkout, flags, root))
                print(version, runs[version][-1], flush=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    out = {
        "benchmark": "bundled_run",
        "date": now.isoformat(timespec="seconds"),
        "machine": {
            "nproc": os.cpu_count(),
            "ram_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30),
        },
        "command": f"python -m beam_pipeline --runner=DirectRunner {args.args}",
        "before": _commit(args.before),
        "after": _commit(REPO),
        "order": "before, after, alternating; a fresh pipeline root each",
        "runs": runs,
        "wall_s_median": {v: statistics.median(r["wall_s"] for r in rs) for v, rs in runs.items()},
        "cpu_s_median": {v: statistics.median(r["cpu_s"] for r in rs) for v, rs in runs.items()},
        "reproduce": (
            f"python benchmarks/bench_bundled_run.py --before <checkout> --repeats {args.repeats} "
            f"--args={shlex.quote(args.args)} --result_name {args.result_name}"
        ),
    }
    stamp = now.strftime("%Y%m%d-%H%M")
    path = os.path.join(HERE, "results", f"{args.result_name}_{stamp}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
    print(json.dumps({k: out[k] for k in ("wall_s_median", "cpu_s_median")}))
    print(path)


if __name__ == "__main__":
    main()
