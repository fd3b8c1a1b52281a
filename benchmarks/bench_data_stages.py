#!/usr/bin/env python3
"""Times each data stage of this repo's pipeline on one CSV and records peak memory.

  python benchmarks/bench_data_stages.py --data CSV --module_file M [--rows N]
      [--label NAME] [--beam_args="--direct_running_mode=multi_processing ..."]
      [--cli_args="--no_infer_feature_shape ..."] [--keep] [-- more CLI flags]

(--beam_args and --cli_args take one shell-quoted string; write them with "=", as
argparse reads a separate value that starts with "--" as a flag.)

Runs, in its own session, with this repo on PYTHONPATH:

  .venv/bin/python -m beam_pipeline --runner=DirectRunner --data CSV --module_file M
      --pipeline_root <fresh folder> --no_trainer --no_tuner [cli args] [beam args]

(with --train: without --no_trainer, so the Trainer, Evaluator, InfraValidator and
Pusher run too; the Evaluator's rows/s are the eval rows it evaluated over its seconds).

and samples the RSS (and PSS) of every process of that session every 0.2 s (see
_measure.py). When it ends, reads ``<pipeline_root>/runs/<run_id>/summary.json`` (written
by the CLI) for each stage's status, row counts and seconds. Rows per second of a stage
are the dataset's rows divided by the stage's seconds (Schema and Validation read
statistics, not rows, so theirs are only for completeness). Writes the result as JSON
under benchmarks/results/ and prints it as a markdown table row.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import shlex
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import _measure  # noqa: E402

ROW_STAGES = ("ExampleGen", "Statistics", "Transform")


def count_csv_rows(path: str) -> int:
    """Data rows of a CSV file, or of every .csv file of a folder (one header each)."""
    import csv

    files = [path] if os.path.isfile(path) else sorted(glob.glob(os.path.join(path, "*.csv")))
    n = 0
    for fn in files:
        with open(fn, newline="") as f:
            n += sum(1 for _ in csv.reader(f)) - 1
    return n


def _rows_of(counts: dict) -> int:
    return int(sum(v for v in counts.values() if isinstance(v, (int, float))))


def _mib(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def markdown_row(
    r: dict, stages=("ExampleGen", "Statistics", "Schema", "Validation", "Transform")
) -> str:
    cells = [r["workload"], f"{r['rows']:,}", r["mode"]]
    for s in stages:
        sec = r["stages_s"].get(s)
        rps = r["rows_per_s"].get(s)
        cells.append(
            "-"
            if sec is None
            else (f"{sec:.1f} s ({rps:,}/s)" if rps and s in ROW_STAGES else f"{sec:.1f} s")
        )
    cells += [
        f"{r['stages_sum_s']:.1f} s",
        f"{r['wall_s']:.1f} s",
        f"{r['peak_tree_rss_mib']:,.0f}",
        _mib(r.get("peak_tree_uss_mib")),
        f"{r['max_process_rss_mib']:,.0f}",
        f"{r['machine']['other_cpu_share_of_one_core']:.2f}",
    ]
    return "| " + " | ".join(cells) + " |"


MARKDOWN_HEAD = (
    "| workload | rows | Beam mode | ExampleGen | Statistics | Schema | Validation | Transform | "
    "stages sum | process wall | peak tree RSS MiB | peak tree USS MiB | max process RSS MiB | "
    "others' CPU (cores) |\n" + "|---" * 14 + "|"
)


def _evaluator(stages: list, stages_s: dict) -> dict | None:
    """The Evaluator's evaluated rows, seconds and rows/s (None when it did not run)."""
    ev = next((s for s in stages if s["stage"] == "Evaluator" and s.get("status") == "ok"), None)
    if ev is None:
        return None
    rows, seconds = _rows_of(ev.get("rows_in", {})), stages_s.get("Evaluator")
    per_s = round(rows / seconds) if rows and seconds else None
    return {"rows": rows, "seconds": seconds, "rows_per_s": per_s}


def repo_version() -> dict:
    """This repo's commit and whether tracked files differ from it (read-only git calls)."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)

    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
        return {}
    return {
        "commit": head.stdout.strip(),
        "dirty": git("diff", "--quiet", "HEAD", "--").returncode != 0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--data", required=True, help="CSV file (or folder/glob, passed to the CLI as is)"
    )
    ap.add_argument("--module_file", required=True)
    ap.add_argument(
        "--rows",
        type=int,
        default=None,
        help="dataset rows (default: ExampleGen's rows_in from summary.json, else counted)",
    )
    ap.add_argument(
        "--label", default=None, help="workload name in the result (default: from --data)"
    )
    ap.add_argument(
        "--beam_args", default="", help='Beam flags in one string: --beam_args="--a=1 --b"'
    )
    ap.add_argument(
        "--cli_args", default="", help="more beam_pipeline flags, one shell-quoted string"
    )
    ap.add_argument("--python", default=os.path.join(REPO, ".venv", "bin", "python"))
    ap.add_argument(
        "--work_dir",
        default=os.path.join(HERE, "out", "ours"),
        help="pipeline roots and logs go here (not committed)",
    )
    ap.add_argument("--results_dir", default=os.path.join(HERE, "results"))
    ap.add_argument(
        "--train",
        action="store_true",
        help="run the Trainer and the model checks too (not --no_trainer; still --no_tuner): "
        "the Evaluator's rows/s are its evaluated rows over its seconds",
    )
    ap.add_argument("--keep", action="store_true", help="keep the pipeline root")
    ap.add_argument("--timeout_s", type=float, default=None)
    ap.add_argument("--header", action="store_true", help="print the markdown table head too")
    ap.add_argument("extra", nargs="*", help="after --: more CLI flags, passed as they are")
    a = ap.parse_args()

    data = os.path.abspath(a.data) if os.path.exists(a.data) else a.data
    label = a.label or os.path.splitext(os.path.basename(data.rstrip("/")))[0]
    if label == "data":  # benchmarks/out/data/taxi_N/data.csv -> taxi_N
        label = os.path.basename(os.path.dirname(data))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    root = os.path.join(os.path.abspath(a.work_dir), f"{label}-{stamp}")
    os.makedirs(root, exist_ok=True)
    beam_args = shlex.split(a.beam_args)
    cmd = [
        a.python,
        "-m",
        "beam_pipeline",
        "--runner=DirectRunner",
        "--data",
        data,
        "--module_file",
        os.path.abspath(a.module_file),
        "--pipeline_root",
        root,
        *([] if a.train else ["--no_trainer"]),
        "--no_tuner",
        *shlex.split(a.cli_args),
        *a.extra,
        *beam_args,
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    log = root + ".log"
    print(f"running: {shlex.join(cmd)}\nlog: {log}", flush=True)
    m = _measure.run_measured(cmd, log_path=log, env=env, cwd=REPO, timeout_s=a.timeout_s)

    summaries = sorted(glob.glob(os.path.join(root, "runs", "*", "summary.json")))
    summary = None
    if summaries:
        with open(summaries[-1]) as f:
            summary = json.load(f)
    stages = (summary or {}).get("stages", [])
    stages_s = {s["stage"]: round(float(s.get("seconds", 0.0)), 2) for s in stages}
    status = {s["stage"]: s.get("status") for s in stages}
    rows = a.rows
    if rows is None:
        eg = next((s for s in stages if s["stage"] == "ExampleGen"), None)
        rows = _rows_of(eg.get("rows_in", {})) if eg else 0
        if not rows and os.path.exists(data):
            rows = count_csv_rows(data)
    # The DirectRunner mode, as compare.py groups results by it (in_memory: the CLI's default).
    flag = {x.split("=", 1)[0]: x.split("=", 1)[1] for x in beam_args if "=" in x}
    direct_mode = flag.get("--direct_running_mode", "in_memory")
    if "--direct_num_workers" in flag:
        direct_mode += f"/workers={flag['--direct_num_workers']}"
    if a.train:  # apart in compare.py's tables: its stage times include the model's stages
        direct_mode += "+train"
    ok = (
        m["rc"] == 0
        and summary is not None
        and all(v in ("ok", "skipped") for v in status.values())
    )
    result = {
        "system": "beam_pipeline",
        "workload": label,
        "rows": rows,
        "data": data,
        "module_file": os.path.abspath(a.module_file),
        "repo": repo_version(),
        "mode": direct_mode,
        "started": stamp,
        "ok": ok,
        "stage_status": status,
        "stages_s": stages_s,
        "stages_sum_s": round(sum(stages_s.values()), 2),
        "rows_per_s": {k: (round(rows / v) if v and rows else None) for k, v in stages_s.items()},
        # The Evaluator reads the eval split only: its rows are the rows it evaluated.
        "evaluator": _evaluator(stages, stages_s),
        "stage_rows": {
            s["stage"]: {
                "in": s.get("rows_in", {}),
                "out": s.get("rows_out", {}),
                "rejected": s.get("rows_rejected", 0),
            }
            for s in stages
        },
        "log": log,
        **{k: v for k, v in m.items() if k != "cmd"},
        "cmd": cmd,
    }
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)
    # Failed runs stay out of the committed results folder.
    results_dir = a.results_dir if ok else os.path.join(HERE, "out", "failed")
    os.makedirs(results_dir, exist_ok=True)
    path = os.path.join(results_dir, f"ours_{label}_{stamp}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    if a.header:
        print(MARKDOWN_HEAD)
    print(markdown_row(result))
    if result["evaluator"]:
        e = result["evaluator"]
        print(f"Evaluator: {e['rows']:,} rows in {e['seconds']} s ({e['rows_per_s']:,} rows/s)")
    print(f"machine: {json.dumps(result['machine'])}")
    print(f"result: {path}")
    if not ok:
        with open(log, errors="replace") as f:
            print("".join(f.readlines()[-30:]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
