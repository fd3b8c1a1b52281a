#!/usr/bin/env python3
"""A cost model of a tuning search on Dataflow: one job per trial, per round, or per search.

  python benchmarks/dataflow_cost.py RESULTS.json [--trials 60] [--parallel 8]
      [--startup_min 3] [--trial_min T]

RESULTS.json is a ``bench_tuner.py`` or ``bench_scaling.py`` result: the measured figures
come from it (the mean trial time and each schedule's fan-out per trial, from its run
with the most workers). What no run here can measure is a Dataflow job's start-up (worker
VMs booting, the container pulled, the SDK harness started): it is ``--startup_min``, an
assumption stated in the table's heading, never a measurement. ``--trial_min`` replaces
the measured trial time with a longer one (a real model's trial).

For T trials, P at a time, a start-up of S minutes, a trial of t minutes and a fan-out of f
minutes per trial (the schedule's own cost beyond training, measured):

- per trial (``rolling``): T jobs; each slot runs T/P jobs one after another:
  wall = T/P x (S + t + f); worker-minutes = T x (S + t + f).
- per round (``rounds``): ceil(T/P) jobs of P workers, each round as long as its slowest
  trial (taken as t): wall = ceil(T/P) x (S + t + f); worker-minutes = P x wall.
- per search (``search_job``): 1 job of P workers, each looping over T/P trials:
  wall = S + T/P x (t + f); worker-minutes = P x wall.
"""

from __future__ import annotations

import argparse
import json
import math


def _measured(result: dict) -> tuple[dict, float, dict]:
    """(the tuner result with the most workers, its mean trial s, fan-out s per schedule)."""
    runs = result["tuner"] if result.get("benchmark") == "scaling" else [result]
    run = max(runs, key=lambda r: r["settings"]["parallel"])
    stages = run["stage"]
    trial_s = sum(s["mean_trial_s"] for s in stages.values()) / len(stages)
    return run, trial_s, {name: s["overhead_per_trial_s"] for name, s in stages.items()}


def cost(schedule: str, trials: int, parallel: int, startup: float, trial: float, fan: float):
    """(jobs, wall minutes, worker-minutes) of one search; times in minutes."""
    per_slot = trials / parallel
    if schedule == "rolling":
        wall = per_slot * (startup + trial + fan)
        return trials, wall, trials * (startup + trial + fan)
    if schedule == "rounds":
        rounds = math.ceil(trials / parallel)
        wall = rounds * (startup + trial + fan)
        return rounds, wall, parallel * wall
    wall = startup + per_slot * (trial + fan)
    return 1, wall, parallel * wall


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("results")
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--startup_min", type=float, default=3.0)
    ap.add_argument("--trial_min", type=float, help="a trial's minutes (default: measured)")
    a = ap.parse_args(argv)
    with open(a.results) as f:
        run, trial_s, fans = _measured(json.load(f))
    trial = a.trial_min if a.trial_min is not None else trial_s / 60
    # rounds' fan-out was not measured in every sitting: rolling's stands in (a job each).
    fans.setdefault("rounds", fans.get("rolling", 0.0))
    print(
        f"{a.trials} trials, {a.parallel} at a time; a trial {trial:.2f} min "
        f"({'given' if a.trial_min is not None else 'measured'}); job start-up "
        f"{a.startup_min} min (assumed, not measured); fan-out per trial measured with "
        f"{run['settings']['parallel']} worker(s) on {run.get('cpus', '?')} cores: "
        + ", ".join(f"{k} {v} s" for k, v in sorted(fans.items()))
        + "\n"
    )
    print("| one job per | schedule | jobs | start-ups (min) | wall (min) | worker-minutes |")
    print("|---|---|---|---|---|---|")
    for label, schedule in (("trial", "rolling"), ("round", "rounds"), ("search", "search_job")):
        jobs, wall, worker_min = cost(
            schedule, a.trials, a.parallel, a.startup_min, trial, fans.get(schedule, 0.0) / 60
        )
        print(
            f"| {label} | `{schedule}` | {jobs} | {jobs * a.startup_min:.0f} | {wall:.1f} | "
            f"{worker_min:.0f} |"
        )


if __name__ == "__main__":
    main()
