#!/usr/bin/env python3
"""BulkInferrer throughput: beam-pipeline's against TFX 1.16's, same model, same rows.

    python benchmarks/bench_bulk_inferrer.py --rows 1000000 [--repeats 1]
        [--configs tfx,ours_in_memory,ours_multi_processing] [--anchor_venv DIR]

What it does (everything under --work, default benchmarks/out/bulk_inferrer; made once,
reused by later calls):
1. the taxi CSV of --rows rows (benchmarks/taxi.py data N, seed 7);
2. TFX's CsvExampleGen turns it into gzip tf.Example TFRecords, one split ``train`` with
   every row (anchors/tfx_bulk_inferrer.py examples): the rows both BulkInferrers score;
3. one SavedModel both load (anchors/taxi_infer_model.py: a Keras 2 model whose
   ``serving_default`` parses serialized tf.Examples; it checks that TF1's session loader,
   tfx-bsl's, restores it);
4. then, in turn, each config ``--repeats`` times, alternating:
   - ``tfx``: Importer(examples) + Importer(model) -> BulkInferrer on LocalDagRunner with
     its default Beam arguments (the DirectRunner's defaults); the time is the
     BulkInferrer execution's, from ML Metadata.
   - ``ours_in_memory`` / ``ours_multi_processing``: ``python -m beam_pipeline`` with
     ``--infer_data`` the same TFRecords and ``--infer_model`` the same SavedModel. The
     CLI runs the BulkInferrer after Transform, so the run gets the cheapest pipeline
     around it: 2000 of the rows as --data, a pass-through preprocessing_fn
     (bulk_inferrer_module.py), --no_trainer, a schema that refuses none of the rows
     (--no_infer_feature_shape --ignore_anomalies); those stages are cached after the first run
     and ``--no_cache=BulkInferrer`` reruns the scoring. The time is the BulkInferrer
     row's seconds in summary.json.
   Each run's PredictionLogs are counted from its output TFRecords and must equal the
   rows scored and --rows.
Results: benchmarks/results/bulk_inferrer_taxi_<rows>_<stamp>.json (machine, every run
with its wall time, the machine's load meanwhile, rows/s, and the ratios of the medians).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from _measure import machine_info, run_measured  # noqa: E402

ANCHORS = os.path.join(HERE, "anchors")
SAMPLE_ROWS = 2000


def _anchor_python(venv: str) -> str:
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        sys.exit(f"No TFX anchor venv at {venv}; make one with sh {ANCHORS}/setup_tfx_anchor.sh")
    return python


def _check(cmd: list[str], log: str) -> str:
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=REPO)
    with open(log) as f:
        text = f.read()
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}); see {log}:\n{text[-3000:]}")
    return text


def _count_records(pattern: str) -> int:
    import tensorflow as tf

    files = sorted(glob.glob(pattern))
    assert files, pattern
    return sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP"))


def prepare(a, work: str) -> dict:
    """The CSV, the examples, the model, the links our CLI reads, the --data sample."""
    anchor = _anchor_python(a.anchor_venv)
    csv_dir = os.path.join(work, "data", f"taxi_{a.rows}")
    if not os.path.exists(os.path.join(csv_dir, "data.csv")):
        n = "sample" if a.rows == 15002 else str(a.rows)
        _check(
            [sys.executable, os.path.join(HERE, "taxi.py"), "--anchor_venv", a.anchor_venv,
             "data", n, "--out_dir", os.path.join(work, "data")],
            os.path.join(work, "taxi_data.log"),
        )  # fmt: skip
    ex_dir = os.path.join(work, f"examples_{a.rows}")
    ex_file = os.path.join(ex_dir, "uri.txt")
    if not os.path.exists(ex_file):
        text = _check(
            [anchor, os.path.join(ANCHORS, "tfx_bulk_inferrer.py"), "examples",
             "--data", csv_dir, "--out", ex_dir],
            os.path.join(work, f"examples_{a.rows}.log"),
        )  # fmt: skip
        with open(ex_file, "w") as f:
            f.write(re.search(r"^EXAMPLES (.*)$", text, re.M).group(1))
    with open(ex_file) as f:
        examples = f.read().strip()
    shards = sorted(glob.glob(os.path.join(examples, "Split-train", "*.gz")))
    # Our reader tells TFRecords by a ".tfrecord" in the name; TFX names them
    # data_tfrecord-*.gz. Links, so both read the very same files.
    links = os.path.join(work, f"links_{a.rows}")
    os.makedirs(links, exist_ok=True)
    for shard in shards:
        link = os.path.join(links, os.path.basename(shard)[: -len(".gz")] + ".tfrecord.gz")
        if not os.path.lexists(link):
            os.symlink(shard, link)
    model_artifact = os.path.join(work, f"model_{a.rows}")
    model = os.path.join(model_artifact, "Format-Serving")  # where TFX's Model artifact has it
    if not os.path.exists(os.path.join(model, "saved_model.pb")):
        _check(
            [anchor, os.path.join(ANCHORS, "taxi_infer_model.py"),
             "--examples", os.path.join(examples, "Split-train", "*.gz"), "--out", model],
            os.path.join(work, f"model_{a.rows}.log"),
        )  # fmt: skip
    sample = os.path.join(work, f"sample_{a.rows}.tfrecord.gz")
    if not os.path.exists(sample):
        import tensorflow as tf

        records = tf.data.TFRecordDataset(shards[:1], compression_type="GZIP").take(SAMPLE_ROWS)
        with tf.io.TFRecordWriter(sample + ".tmp", "GZIP") as w:
            for r in records:
                w.write(r.numpy())
        os.rename(sample + ".tmp", sample)
    return {
        "csv": os.path.join(csv_dir, "data.csv"),
        "examples": examples,
        "shards": len(shards),
        "links": os.path.join(links, "*.tfrecord.gz"),
        "model_artifact": model_artifact,
        "model": model,
        "sample": sample,
    }


def run_tfx(a, work: str, prep: dict, tag: str) -> dict:
    out = os.path.join(work, "tfx_runs", tag)
    cmd = [
        _anchor_python(a.anchor_venv), os.path.join(ANCHORS, "tfx_bulk_inferrer.py"), "infer",
        "--examples", prep["examples"], "--model", prep["model_artifact"], "--out", out,
    ]  # fmt: skip
    log = os.path.join(work, f"{tag}.log")
    measured = run_measured(cmd, log_path=log, cwd=REPO)
    with open(log) as f:
        text = f.read()
    found = re.search(r"^RESULT (.*)$", text, re.M)
    if measured["rc"] or not found:
        sys.exit(f"TFX's BulkInferrer failed; see {log}:\n{text[-3000:]}")
    result = json.loads(found.group(1))
    return {
        "command": " ".join(cmd[1:]),
        "stage_s": result["stage_s"],
        "prediction_logs": result["prediction_logs"],
        "rows_scored": result["prediction_logs"],  # TFX counts nothing else
        "measured": measured,
    }


def run_ours(a, work: str, prep: dict, tag: str, mode: str) -> dict:
    root = os.path.join(work, "ours_root")
    cmd = [
        sys.executable, "-m", "beam_pipeline",
        f"--data={prep['sample']}",
        f"--module_file={os.path.join(HERE, 'bulk_inferrer_module.py')}",
        "--no_trainer", "--no_tuner", "--no_progress",
        # The sample's schema must not refuse the other rows: no fixed shapes (a value
        # missing elsewhere), no blocking anomalies (a company the sample lacks).
        "--no_infer_feature_shape", "--ignore_anomalies",
        f"--pipeline_root={root}", f"--run_id={tag}",
        f"--infer_data={prep['links']}", f"--infer_model={prep['model']}",
        "--no_cache=BulkInferrer",
        f"--direct_running_mode={mode}",
    ]  # fmt: skip
    if mode == "multi_processing":
        cmd.append(f"--direct_num_workers={os.cpu_count()}")
    log = os.path.join(work, f"{tag}.log")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    measured = run_measured(cmd, log_path=log, env=env, cwd=REPO)
    summary = os.path.join(root, "runs", tag, "summary.json")
    if measured["rc"] or not os.path.exists(summary):
        with open(log) as f:
            sys.exit(f"Our BulkInferrer run failed; see {log}:\n{f.read()[-3000:]}")
    with open(summary) as f:
        row = next(s for s in json.load(f)["stages"] if s["stage"] == "BulkInferrer")
    assert row["status"] == "ok", row
    logs = _count_records(os.path.join(root, "runs", tag, "inference_result", "prediction_logs-*"))
    return {
        "command": " ".join(cmd[1:]),
        "stage_s": row["seconds"],
        "prediction_logs": logs,
        "rows_read": row["details"]["rows_read"],
        "rows_scored": row["details"]["rows_scored"],
        "rows_rejected": row["details"]["rows_rejected"],
        "measured": measured,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1000000)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--configs", default="tfx,ours_in_memory,ours_multi_processing")
    p.add_argument("--work", default=os.path.join(HERE, "out", "bulk_inferrer"))
    p.add_argument(
        "--anchor_venv",
        default=os.environ.get("TFX_ANCHOR_VENV", os.path.join(HERE, "out", "tfx-anchor")),
    )
    p.add_argument("--results_dir", default=os.path.join(HERE, "results"))
    a = p.parse_args()
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    prep = prepare(a, work)
    configs = a.configs.split(",")
    runs = []
    for i in range(a.repeats):
        for config in configs:
            tag = f"{config}_{stamp}_{i}"
            print(f"{tag} ...", flush=True)
            if config == "tfx":
                run = run_tfx(a, work, prep, tag)
            else:
                run = run_ours(a, work, prep, tag, config.removeprefix("ours_"))
            run.update(config=config, repeat=i, rows_per_s=round(a.rows / run["stage_s"], 1))
            # Every row scored once: PredictionLogs = rows scored = rows in the data.
            run["counts_ok"] = run["prediction_logs"] == run["rows_scored"] == a.rows
            runs.append(run)
            m = run["measured"]
            m.pop("rss_timeline_mib", None)
            print(
                f"  {run['stage_s']:.1f} s, {run['rows_per_s']:.0f} rows/s, "
                f"{run['prediction_logs']} PredictionLogs (counts_ok={run['counts_ok']}); "
                f"other processes took {m['machine']['other_cpu_share_of_one_core']} of a core",
                flush=True,
            )
    medians = {
        c: statistics.median(r["stage_s"] for r in runs if r["config"] == c) for c in configs
    }
    ratios = {
        c: round(medians["tfx"] / medians[c], 2) for c in configs if c != "tfx" and "tfx" in medians
    }
    result = {
        "benchmark": "bulk_inferrer",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": dict(machine_info(), nproc=os.cpu_count()),
        "rows": a.rows,
        "inputs": {k: v for k, v in prep.items()},
        "median_stage_s": medians,
        "speedup_vs_tfx": ratios,
        "runs": runs,
    }
    os.makedirs(a.results_dir, exist_ok=True)
    path = os.path.join(a.results_dir, f"bulk_inferrer_taxi_{a.rows}_{stamp}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"median_stage_s": medians, "speedup_vs_tfx": ratios}))
    print(path)


if __name__ == "__main__":
    main()
