#!/usr/bin/env python3
"""The data stages with the live progress display on and off, alternated in one sitting.

  python benchmarks/bench_progress.py --data CSV [--runs 3] [--tty] [-- more CLI flags]
  python benchmarks/bench_progress.py --display_cpu 30

The second form measures the display alone: a process that shows one running stage (a
Beam job with a link and, with ``counters``, its counters to read every 5 s) for that many
seconds, its CPU from ``getrusage`` while the main thread sleeps, in a pseudo-terminal and
through a pipe.

Runs, ``--runs`` times each and alternating (on, off, on, off, ...):

  .venv/bin/python -m beam_pipeline --data CSV --pipeline_root <fresh folder>
      --no_trainer --no_tuner [--no_progress] [more CLI flags]

With ``--tty`` the command's stdout is a pseudo-terminal (``script``), so the display is
rich's live line redrawn four times a second, its costlier form; without it, stdout is a
file and the display prints plain lines. Each run is measured by ``_measure.py`` (wall,
CPU of the process tree, load average before and after); each stage's seconds come from
the run's ``summary.json``. Prints one line per run and the means per setting, and writes
everything as JSON under benchmarks/results/.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shlex
import shutil
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import _measure  # noqa: E402

SETTINGS = ("on", "off")

# The display alone, showing one running stage for argv[2] seconds; prints its CPU.
_DISPLAY_ONLY = """
import resource, sys, time
from beam_pipeline.engine.events import RunEvents
from beam_pipeline.progress import ProgressDisplay
from beam_pipeline.runtime.runners import JobInfo

counts = {"example_gen.rows_read": 1000, "example_gen.rows_out.train": 667,
          "example_gen.rows_out.eval": 333}
events = RunEvents()
with ProgressDisplay(events, sys.stdout):
    events.run_started("/nonexistent")
    events.stage_started("ExampleGen+Statistics")
    read = (lambda: counts) if sys.argv[1] == "counters" else None
    events.job_submitted(JobInfo("DataflowRunner", "job", "https://example.org/job"), read)
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(float(sys.argv[2]))
    after = resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
print(f"DISPLAY_CPU_MS {cpu * 1000:.1f}", file=sys.stderr)
"""


def display_cpu(a) -> None:
    """The display's own CPU over ``--display_cpu`` seconds, per output and counters."""
    import re
    import subprocess

    env = dict(os.environ, PYTHONPATH=REPO, COLUMNS="120", TERM="xterm-256color")
    for tty in (True, False):
        for what in ("no counters", "counters"):
            cmd = [a.python, "-c", _DISPLAY_ONLY, what, str(a.display_cpu)]
            if tty:
                cmd = ["script", "-qefc", shlex.join(cmd), "/dev/null"]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=REPO)
            found = re.search(r"DISPLAY_CPU_MS ([\d.]+)", proc.stdout + proc.stderr)
            if not found:
                sys.exit(f"the display-only run failed:\n{proc.stderr[-2000:]}")
            where = "pseudo-terminal" if tty else "pipe"
            print(f"{where}, {what}: {found.group(1)} ms of CPU in {a.display_cpu} s")
    print(f"load average: {os.getloadavg()}")


def run_once(a, setting: str, stamp: str, i: int) -> dict:
    root = os.path.join(os.path.abspath(a.work_dir), f"progress-{stamp}-{i}-{setting}")
    os.makedirs(root, exist_ok=True)
    cmd = [
        a.python,
        "-m",
        "beam_pipeline",
        "--data",
        os.path.abspath(a.data),
        "--pipeline_root",
        root,
        "--no_trainer",
        "--no_tuner",
        *(["--no_progress"] if setting == "off" else []),
        *a.extra,
    ]
    if a.tty:  # stdout on a pseudo-terminal: rich's live display
        cmd = ["script", "-qefc", shlex.join(cmd), "/dev/null"]
    env = dict(os.environ, PYTHONPATH=REPO, COLUMNS="120", TERM="xterm-256color")
    log = root + ".log"
    m = _measure.run_measured(cmd, log_path=log, env=env, cwd=REPO)
    stages = []
    for path in glob.glob(os.path.join(root, "runs", "*", "summary.json")):
        with open(path) as f:
            stages = json.load(f).get("stages", [])
    seconds = {s["stage"]: round(float(s.get("seconds") or 0.0), 2) for s in stages}
    shutil.rmtree(root, ignore_errors=True)
    if m["rc"] != 0 or not stages:
        with open(log, errors="replace") as f:
            sys.exit(f"run {i} ({setting}) failed:\n" + "".join(f.readlines()[-30:]))
    return {
        "setting": setting,
        "wall_s": m["wall_s"],
        "cpu_s": m["cpu_s"],
        "stages_s": seconds,
        "loadavg_before": m["machine"]["loadavg_before"],
        "loadavg_after": m["machine"]["loadavg_after"],
        "others_cpu_cores": m["machine"]["other_cpu_share_of_one_core"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", help="CSV file (benchmarks/make_dataset.py)")
    ap.add_argument(
        "--display_cpu", type=float, default=None, help="seconds: measure the display alone"
    )
    ap.add_argument("--runs", type=int, default=3, help="runs per setting (default 3)")
    ap.add_argument("--tty", action="store_true", help="stdout on a pseudo-terminal")
    ap.add_argument("--python", default=os.path.join(REPO, ".venv", "bin", "python"))
    ap.add_argument("--work_dir", default=os.path.join(HERE, "out", "progress"))
    ap.add_argument("--results_dir", default=os.path.join(HERE, "results"))
    ap.add_argument("extra", nargs="*", help="after --: more CLI flags")
    a = ap.parse_args()
    if a.display_cpu:
        display_cpu(a)
        return
    if not a.data:
        ap.error("--data is required (or --display_cpu)")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    runs = []
    for i in range(a.runs):
        for setting in SETTINGS:
            r = run_once(a, setting, stamp, i)
            runs.append(r)
            print(json.dumps(r), flush=True)
    data_stage = "ExampleGen"  # ExampleGen+Statistics: one Beam job, booked on ExampleGen
    summary = {}
    for setting in SETTINGS:
        mine = [r for r in runs if r["setting"] == setting]
        summary[setting] = {
            key: round(statistics.mean(values), 1)
            for key, values in (
                ("data_job_s", [r["stages_s"].get(data_stage, 0.0) for r in mine]),
                ("wall_s", [r["wall_s"] for r in mine]),
                ("cpu_s", [r["cpu_s"] for r in mine]),
            )
        }
        print(f"{setting}: {json.dumps(summary[setting])}")
    os.makedirs(a.results_dir, exist_ok=True)
    path = os.path.join(a.results_dir, f"progress_{stamp}.json")
    with open(path, "w") as f:
        json.dump(
            {"data": a.data, "tty": a.tty, "extra": a.extra, "runs": runs, "mean": summary},
            f,
            indent=1,
        )
    print(f"result: {path}")


if __name__ == "__main__":
    main()
