#!/usr/bin/env python3
"""Runs the TFX 1.16 anchor (data stages only) on a CSV folder and records its timings
and peak memory as JSON under benchmarks/results/.

  python benchmarks/run_tfx.py --data benchmarks/out/data/taxi_200000 [--module taxi]
      [--label taxi_200000] [--workers 0] [--keep]

Runs ``<anchor venv>/bin/python benchmarks/anchors/tfx_anchor.py --data DIR --module
taxi --out OUT --no-train`` (CsvExampleGen, StatisticsGen, SchemaGen, ExampleValidator,
Transform on LocalDagRunner, Beam DirectRunner in multi_processing mode with one worker
per core) in its own session and samples the RSS of every process of that session every
0.2 s (see _measure.py). Per-component seconds are the anchor's own, read from ML
Metadata (each execution's last update minus its creation); ``anchor_total_s`` is its
LocalDagRunner.run() time; ``wall_s`` is the whole process, Python and TFX imports
included.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _measure  # noqa: E402
from taxi import ANCHOR_VENV, ANCHORS  # noqa: E402  where the anchor set-up lives

# The anchor's component names and the stage of this repo each one corresponds to.
STAGE_OF = {
    "CsvExampleGen": "ExampleGen",
    "StatisticsGen": "Statistics",
    "SchemaGen": "Schema",
    "ExampleValidator": "Validation",
    "Transform": "Transform",
}


def count_rows(path: str) -> int:
    """Data rows in a CSV file or in every .csv file of a folder (header lines excluded).

    Counts lines, so it assumes no quoted newlines (true of the taxi data)."""
    files = (
        [path]
        if os.path.isfile(path)
        else [os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".csv")]
    )
    n = 0
    for fn in files:
        with open(fn, "rb") as f:
            n += sum(1 for _ in f) - 1
    return n


def parse_anchor_output(text: str) -> tuple[dict, float | None]:
    comps, total = {}, None
    for line in text.splitlines():
        m = re.match(r"^(\w+)\s+([\d.]+) s$", line.strip())
        if m and m.group(1) != "TOTAL":
            comps[m.group(1)] = float(m.group(2))
        m = re.match(r"^TOTAL ([\d.]+) s$", line.strip())
        if m:
            total = float(m.group(1))
    return comps, total


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--data", required=True, help="folder holding the CSV file(s)")
    ap.add_argument("--module", default="taxi", choices=["taxi", "penguin"])
    ap.add_argument(
        "--label", default=None, help="workload name in the result (default: the folder's name)"
    )
    ap.add_argument("--workers", type=int, default=0, help="--direct_num_workers (0: one per core)")
    ap.add_argument(
        "--anchor_python",
        default=os.path.join(ANCHOR_VENV, "bin", "python"),
    )
    ap.add_argument(
        "--work_dir",
        default=os.path.join(HERE, "out", "tfx"),
        help="where the anchor's artifacts and log go (not committed)",
    )
    ap.add_argument("--results_dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--keep", action="store_true", help="keep the anchor's artifacts")
    ap.add_argument("--timeout_s", type=float, default=None)
    a = ap.parse_args()

    data = os.path.abspath(a.data.rstrip("/"))
    if os.path.isfile(data):
        sys.exit("--data must be a folder (TFX's CsvExampleGen reads every file of a folder)")
    label = a.label or os.path.basename(data)
    rows = count_rows(data)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = os.path.join(os.path.abspath(a.work_dir), f"{label}-{stamp}")
    os.makedirs(out, exist_ok=True)
    cmd = [
        a.anchor_python,
        os.path.join(ANCHORS, "tfx_anchor.py"),
        "--data",
        data,
        "--module",
        a.module,
        "--out",
        out,
        "--no-train",
        "--workers",
        str(a.workers),
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1"))
    log = out + ".log"
    print(f"running: {' '.join(cmd)}\nlog: {log}", flush=True)
    m = _measure.run_measured(cmd, log_path=log, env=env, timeout_s=a.timeout_s)
    with open(log, errors="replace") as f:
        comps, total = parse_anchor_output(f.read())
    if not a.keep:
        shutil.rmtree(out, ignore_errors=True)

    result = {
        "system": "tfx-1.16-anchor",
        "workload": label,
        "module": a.module,
        "rows": rows,
        "data": data,
        "started": stamp,
        "ok": m["rc"] == 0 and total is not None,
        "components_s": comps,
        "stages_s": {STAGE_OF.get(k, k): v for k, v in comps.items()},
        "stages_sum_s": round(sum(comps.values()), 2),
        "anchor_total_s": total,
        "rows_per_s": {
            STAGE_OF.get(k, k): round(rows / v) if v else None for k, v in comps.items()
        },
        "beam": f"DirectRunner multi_processing, direct_num_workers={a.workers}",
        "log": log,
        **{k: v for k, v in m.items() if k != "cmd"},
        "cmd": cmd,
    }
    # Failed runs stay out of the committed results folder.
    results_dir = a.results_dir if result["ok"] else os.path.join(HERE, "out", "failed")
    os.makedirs(results_dir, exist_ok=True)
    path = os.path.join(results_dir, f"tfx_{label}_{stamp}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "workload",
                    "rows",
                    "ok",
                    "rc",
                    "stages_s",
                    "anchor_total_s",
                    "wall_s",
                    "peak_tree_rss_mib",
                    "peak_tree_pss_mib",
                    "max_process_rss_mib",
                )
            },
            indent=1,
        )
    )
    print(f"machine: {json.dumps(result['machine'])}")
    print(f"result: {path}")
    if not result["ok"]:
        with open(log, errors="replace") as f:
            print("".join(f.readlines()[-30:]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
