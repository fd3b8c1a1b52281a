#!/usr/bin/env python3
"""What recording and checking a run's artifacts costs, next to the stages that made them.

  python benchmarks/bench_artifact_check.py PIPELINE_ROOT [--run_id ID] [--repeat N]

For a finished run (e.g. one kept by ``bench_data_stages.py --keep``), times, per published
artifact, what the stage runner adds (:mod:`beam_pipeline.engine.contents`):

- ``describe``: listing its files, their sizes and the digests of the small ones, done
  once when the artifact is published;
- ``changed``: the same check against the listing recorded in the run's manifest, done
  before each reuse of the artifact by a later run;
- ``digest_all``: the alternative not taken, every file digested (the example shards
  too), once;

and compares their sum with the seconds of the stages that ran (summary.json). The files
are read as the run left them (in the page cache, as right after a publish); best of
``--repeat`` timings. Writes JSON under benchmarks/results/ and prints a summary line.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from beam_pipeline.engine.contents import SMALL_FILE_BYTES, changed, describe  # noqa: E402


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _machine() -> dict:
    with open("/proc/meminfo") as f:
        mem = {line.split(":")[0]: line.split()[1] for line in f}
    return {
        "nproc": os.cpu_count(),
        "memtotal_mib": int(mem["MemTotal"]) // 1024,
        "loadavg": list(os.getloadavg()),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--run_id", default=None, help="default: the only run under ROOT/runs")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="taxi_1000000")
    ap.add_argument("--results_dir", default=os.path.join(HERE, "results"))
    a = ap.parse_args()

    runs = os.path.join(a.root, "runs")
    run_id = a.run_id or sorted(os.listdir(runs))[-1]
    run = os.path.join(runs, run_id)
    with open(os.path.join(run, "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(run, "summary.json")) as f:
        stages_s = {s["stage"]: s["seconds"] for s in json.load(f)["stages"]}
    artifacts = {}
    for stage, record in manifest["stages"].items():
        for output in record.get("outputs", []):
            uri, recorded = output["uri"], output["properties"].get("files")
            if recorded is None or not os.path.isdir(uri):
                continue
            assert changed(uri, recorded) is None, uri
            artifacts[os.path.basename(uri)] = {
                "stage": stage,
                "files": len(recorded),
                "bytes": sum(size for size, _ in recorded.values()),
                "digested_bytes": sum(s for s, d in recorded.values() if d is not None),
                "describe_s": round(_best(lambda u=uri: describe(u), a.repeat), 4),
                "check_s": round(_best(lambda u=uri, r=recorded: changed(u, r), a.repeat), 4),
                # The alternative not taken: every file digested, the shards too.
                "digest_all_s": round(_best(lambda u=uri: describe(u, small=1 << 62), 1), 4),
            }
    stage_total = round(sum(stages_s.values()), 2)
    describe_total = round(sum(x["describe_s"] for x in artifacts.values()), 4)
    check_total = round(sum(x["check_s"] for x in artifacts.values()), 4)
    digest_all_total = round(sum(x["digest_all_s"] for x in artifacts.values()), 4)
    result = {
        "benchmark": "artifact_check",
        "workload": a.label,
        "root": os.path.abspath(a.root),
        "run_id": run_id,
        "small_file_bytes": SMALL_FILE_BYTES,
        "stages_s": stages_s,
        "stages_sum_s": stage_total,
        "artifacts": artifacts,
        "describe_total_s": describe_total,
        "check_total_s": check_total,
        "describe_share_of_stages": round(describe_total / stage_total, 5) if stage_total else None,
        "check_share_of_stages": round(check_total / stage_total, 5) if stage_total else None,
        "digest_all_total_s": digest_all_total,
        "digest_all_share_of_stages": (
            round(digest_all_total / stage_total, 5) if stage_total else None
        ),
        "repeat": a.repeat,
        "machine": _machine(),
    }
    os.makedirs(a.results_dir, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = os.path.join(a.results_dir, f"artifact_check_{a.label}_{stamp}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(
        f"{a.label}: stages {stage_total} s; recording {describe_total} s "
        f"({100 * result['describe_share_of_stages']:.2f}%), checking {check_total} s "
        f"({100 * result['check_share_of_stages']:.2f}%) over {len(artifacts)} artifacts; "
        f"digesting every file would take {digest_all_total} s "
        f"({100 * result['digest_all_share_of_stages']:.2f}%) "
        f"-> {path}"
    )


if __name__ == "__main__":
    main()
