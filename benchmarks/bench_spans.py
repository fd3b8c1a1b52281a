#!/usr/bin/env python3
"""Spans arriving one after another: a run after each reads only the new span.

  python benchmarks/bench_spans.py [--rows 200000] [--spans 3] [--work DIR] [--keep]

Writes ``--spans`` spans of ``--rows`` rows each (make_dataset.py, one seed per span) as
``<work>/data/span-<n>/data.csv``, then, in one sitting:

1. under one pipeline root, a run after each span arrives (``--data
   '<work>/data/span-{SPAN}/*.csv' --span_window <spans so far>``): each reads its new
   span only, the older spans' ExampleGen + Statistics units and tf.Transform analyzer
   cache entries being reused;
2. under a new pipeline root, one run of the full window read anew.

Each run: this repo's CLI on the DirectRunner with ``--no_tuner --no_trainer`` and
benchmarks/synth_module.py, so the data stages (ExampleGen, Statistics, Transform) are
what is timed; measured by _measure.py (wall time, peak memory, the machine's load).
Writes the result as JSON under benchmarks/results/ and prints the figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import _measure  # noqa: E402


def _make_spans(data: str, spans: int, rows: int) -> None:
    for span in range(1, spans + 1):
        folder = os.path.join(data, f"span-{span}")
        path = os.path.join(folder, "data.csv")
        if os.path.exists(path):
            continue
        os.makedirs(folder, exist_ok=True)
        subprocess.run(
            [sys.executable, os.path.join(HERE, "make_dataset.py"), str(rows), path,
             "--seed", str(span)],
            check=True,
        )  # fmt: skip


def _run(work: str, root: str, run_id: str, window: int, pattern: str) -> dict:
    cmd = [
        os.path.join(REPO, ".venv", "bin", "python"), "-m", "beam_pipeline",
        f"--data={pattern}", f"--span_window={window}", f"--pipeline_root={root}",
        f"--run_id={run_id}", f"--module_file={os.path.join(HERE, 'synth_module.py')}",
        "--no_tuner", "--no_trainer", "--no_progress",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=REPO)
    log = os.path.join(work, f"{os.path.basename(root)}-{run_id}.log")
    m = _measure.run_measured(cmd, log_path=log, env=env, cwd=REPO)
    if m["rc"] != 0 or m["timed_out"]:
        raise SystemExit(f"{run_id} failed; see {log}")
    with open(os.path.join(root, "runs", run_id, "summary.json")) as f:
        stages = {s["stage"]: s for s in json.load(f)["stages"]}
    eg, tr = stages["ExampleGen"], stages["Transform"]
    return {
        "run_id": run_id,
        "window": window,
        "wall_s": round(m["wall_s"], 1),
        "stages_s": {k: s["seconds"] for k, s in stages.items() if s["status"] == "ok"},
        "example_gen_rows_read": eg["details"]["rows_read"],
        "example_gen_rows_in_window": eg["rows_in"]["all"],
        "spans": eg["details"]["spans"],
        "spans_reused": eg["details"]["spans_reused"],
        "analyzer_cache_spans_reused": tr["details"].get("analyzer_cache_spans_reused"),
        "analyzer_cache_spans_analyzed": tr["details"].get("analyzer_cache_spans_analyzed"),
        "example_gen_note": eg["note"],
        "transform_note": tr["note"],
        "peak_tree_rss_mib": m.get("peak_tree_rss_mib"),
        "cpu_s": m.get("cpu_s"),
        "machine_load": m.get("machine"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--spans", type=int, default=3)
    ap.add_argument("--work", default="/tmp/bench_spans")
    ap.add_argument("--keep", action="store_true", help="keep the pipeline roots")
    a = ap.parse_args()
    data = os.path.join(a.work, "data")
    arriving = os.path.join(a.work, "arriving")
    fresh = os.path.join(a.work, "fresh")
    for root in (arriving, fresh):
        shutil.rmtree(root, ignore_errors=True)
    _make_spans(data, a.spans, a.rows)
    pattern = os.path.join(data, "span-{SPAN}", "*.csv")

    # Spans arrive one by one: only spans 1..n exist when run n starts.
    staged = os.path.join(a.work, "staged")
    shutil.rmtree(staged, ignore_errors=True)
    staged_pattern = os.path.join(staged, "span-{SPAN}", "*.csv")
    runs = []
    for n in range(1, a.spans + 1):
        os.makedirs(os.path.join(staged, f"span-{n}"))
        os.link(
            os.path.join(data, f"span-{n}", "data.csv"),
            os.path.join(staged, f"span-{n}", "data.csv"),
        )
        runs.append(_run(a.work, arriving, f"after-span-{n}", n, staged_pattern))
        print(json.dumps(runs[-1], indent=1), flush=True)
    full = _run(a.work, fresh, "all-fresh", a.spans, pattern)
    print(json.dumps(full, indent=1), flush=True)

    last = runs[-1]
    result = {
        "benchmark": "spans",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": _measure.machine_info(),
        "rows_per_span": a.rows,
        "spans": a.spans,
        "command": " ".join(sys.argv),
        "runs_as_spans_arrive": runs,
        "fresh_full_window": full,
        "last_run_wall_s": last["wall_s"],
        "fresh_wall_s": full["wall_s"],
        "speedup": round(full["wall_s"] / last["wall_s"], 2),
    }
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = os.path.join(HERE, "results", f"spans_{a.spans}x{a.rows}_{stamp}.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(
        f"run after span {a.spans}: read {last['example_gen_rows_read']:,} of "
        f"{last['example_gen_rows_in_window']:,} rows, analyzer cache reused for spans "
        f"{last['analyzer_cache_spans_reused']}, {last['wall_s']} s; all spans anew: "
        f"{full['wall_s']} s ({result['speedup']}x); {out}"
    )
    if not a.keep:
        for root in (arriving, fresh, staged):
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
