#!/usr/bin/env python3
"""The data stages with the live progress display on and off, alternated in one sitting.

  python benchmarks/bench_progress.py --data CSV [--runs 3] [--tty] [-- more CLI flags]

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
    ap.add_argument("--data", required=True, help="CSV file (benchmarks/make_dataset.py)")
    ap.add_argument("--runs", type=int, default=3, help="runs per setting (default 3)")
    ap.add_argument("--tty", action="store_true", help="stdout on a pseudo-terminal")
    ap.add_argument("--python", default=os.path.join(REPO, ".venv", "bin", "python"))
    ap.add_argument("--work_dir", default=os.path.join(HERE, "out", "progress"))
    ap.add_argument("--results_dir", default=os.path.join(HERE, "results"))
    ap.add_argument("extra", nargs="*", help="after --: more CLI flags")
    a = ap.parse_args()
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
