#!/usr/bin/env python3
"""How the data stages and the tuner scale with workers, on whatever machine it is given.

  python benchmarks/bench_scaling.py [--workers 1,2,4,8] [--rows 1000000] [--data F.csv]
      [--trials 8] [--train_steps 200] [--schedules search_job,rolling] [--skip tuner]

Same data, same sitting, one worker count after another:

- data: the data phase's Beam job (ExampleGen + Statistics, ``bench_example_gen.py``) on
  ONE CSV file (``make_dataset.py``, ``--rows`` rows, seed 0, unless ``--data`` names
  one), on the DirectRunner in_memory and in multi_processing with each worker count
  (workers forked from the warm fork server, as in a CLI run); each run in a fresh
  process. Its CPU column counts the launcher only when workers are forks.
- tuner: ``bench_tuner.py --parallel N`` for each worker count: keras-tuner's sequential
  search, the control (N plain searches of trials/N side by side, no Beam) and the Tuner
  stage per schedule on N warm worker processes.

Both benchmarks are this folder's own, run as they are (their docstrings define the
figures). Writes ``benchmarks/results/scaling_<stamp>.json`` and prints its tables
(benchmarks/README.md quotes them). Worker counts above the machine's cores are run too:
they measure what the fan-out costs when workers outnumber cores, not a speed-up.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
OUT = os.path.join(HERE, "out")


def _python(*argv: str) -> str:
    """Runs one of this folder's scripts in a fresh process; returns its stdout."""
    done = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, cwd=REPO, check=False
    )
    if done.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-4000:]}")
    return done.stdout


def _data(path: str, workers: list[int]) -> list[dict]:
    runs = []
    settings = [("in_memory", "--direct_running_mode=in_memory")] + [
        (f"{n} worker(s)", f"--direct_running_mode=multi_processing --direct_num_workers={n}")
        for n in workers
    ]
    for label, beam_args in settings:
        out = _python(
            os.path.join(HERE, "bench_example_gen.py"), path, f"--beam_args={beam_args}", "--json"
        )
        run = json.loads(out.strip().splitlines()[-1])
        run.update(setting=label, beam_args=beam_args)
        print(f"data {label}: {run['seconds']} s, CPU {run['cpu_s']} s", flush=True)
        runs.append(run)
    return runs


def _tuner(workers: list[int], args) -> list[dict]:
    runs = []
    for n in workers:
        before = set(glob.glob(os.path.join(RESULTS, "tuner_*.json")))
        _python(
            os.path.join(HERE, "bench_tuner.py"),
            f"--parallel={n}",
            f"--trials={args.trials}",
            f"--train_steps={args.train_steps}",
            f"--schedules={args.schedules}",
        )
        (path,) = set(glob.glob(os.path.join(RESULTS, "tuner_*.json"))) - before
        with open(path) as f:
            result = json.load(f)
        result["file"] = os.path.relpath(path, REPO)
        print(
            f"tuner {n} worker(s): sequential {result['sequential']['sequential_s']} s, "
            + ", ".join(f"{s} {v['stage_s']} s" for s, v in result["stage"].items()),
            flush=True,
        )
        runs.append(result)
    return runs


def _tables(data: list[dict], tuner: list[dict]) -> str:
    lines = []
    if data:
        one = next((r for r in data if r["setting"] == "1 worker(s)"), data[0])
        mem = data[0]
        lines += [
            "| ExampleGen + Statistics | wall s | CPU s | rows/s | vs in_memory | vs 1 worker |",
            "|---|---|---|---|---|---|",
        ]
        for r in data:
            lines.append(
                f"| {r['setting']} | {r['seconds']} | {r['cpu_s']} | "
                f"{r['rows_read'] / r['seconds']:,.0f} | {mem['seconds'] / r['seconds']:.2f}x | "
                f"{one['seconds'] / r['seconds']:.2f}x |"
            )
        lines.append("")
    if tuner:
        names = list(tuner[0]["stage"])
        head = " | ".join(f"{s} s (speedup, of control)" for s in names)
        lines += [
            f"| tuner, {tuner[0]['settings']['trials']} trials | sequential s | "
            f"control s (speedup) | {head} | fan-out s/trial ({', '.join(names)}) |",
            "|---|---|---|" + "---|" * len(names) + "---|",
        ]
        for r in tuner:
            seq = r["sequential"]["sequential_s"]
            control = r["side_by_side"]["pair_s"] if r["side_by_side"] else None
            cells = []
            for s in names:
                stage_s = r["stage"][s]["stage_s"]
                of = f", {control / stage_s:.2f}" if control else ""
                cells.append(f"{stage_s} ({seq / stage_s:.2f}x{of})")
            fan = ", ".join(str(r["stage"][s]["overhead_per_trial_s"]) for s in names)
            ctl = f"{control} ({seq / control:.2f}x)" if control else "n/a"
            lines.append(
                f"| {r['settings']['parallel']} worker(s) | {seq} | {ctl} | "
                + " | ".join(cells)
                + f" | {fan} |"
            )
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--data", help="a CSV file (default: make_dataset.py's, --rows rows)")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--train_steps", type=int, default=200)
    ap.add_argument("--schedules", default="search_job,rolling")
    ap.add_argument("--skip", choices=["data", "tuner"])
    args = ap.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",")]
    started = datetime.datetime.now()
    data_runs, tuner_runs = [], []
    if args.skip != "data":
        path = args.data or os.path.join(OUT, f"synth_{args.rows}.csv")
        if not os.path.exists(path):
            os.makedirs(OUT, exist_ok=True)
            _python(os.path.join(HERE, "make_dataset.py"), str(args.rows), path)
        data_runs = _data(path, workers)
    if args.skip != "tuner":
        tuner_runs = _tuner(workers, args)
    result = {
        "benchmark": "scaling",
        "when": started.strftime("%Y%m%d-%H%M%S"),
        "cpus": os.cpu_count(),
        "settings": vars(args),
        "data": data_runs,
        "tuner": tuner_runs,
    }
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"scaling_{result['when']}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(_tables(data_runs, tuner_runs))
    print(f"\n{os.cpu_count()} cores; results in {os.path.relpath(path, REPO)}")


if __name__ == "__main__":
    main()
