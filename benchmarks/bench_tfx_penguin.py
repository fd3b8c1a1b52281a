#!/usr/bin/env python3
"""TFX's own penguin module end to end: TFX 1.16 against this pipeline, alternated in one
sitting (issue 45's "≥ 5× TFX's wall time").

  python benchmarks/bench_tfx_penguin.py [--sittings 3] [--anchor_venv DIR]

Each sitting runs, back to back and in a fresh folder each:
- TFX: ``<anchor venv>/bin/python benchmarks/anchors/tfx_anchor.py --module penguin --tune``
  (CsvExampleGen, StatisticsGen, SchemaGen, ExampleValidator, Transform, Tuner with TFX's
  6-trial RandomSearch of 20 steps, Trainer of 100 steps; LocalDagRunner, multi_processing
  DirectRunner) with the ``penguin_utils_keras`` that ships in the tfx package;
- ours: ``python -m beam_pipeline`` with the same module file, its ``tfx`` imports ported
  (``tests/testdata/penguin_tfx/``), on the same CSV, the same trial and training steps,
  and every stage it runs by default (the Evaluator skips: TFX's module exports a model
  that records no label; the InfraValidator and Pusher run, which TFX's anchor does not).

Wall time is the whole process, interpreter start and imports included (``_measure``);
the ratio of a sitting is TFX's wall over ours; the headline is the median over the
sittings with the range. Writes ``benchmarks/results/tfx_penguin_<machine>_<date>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import _measure  # noqa: E402
from taxi import ANCHOR_VENV, ANCHORS  # noqa: E402

PENGUIN_TFX = os.path.join(REPO, "tests", "testdata", "penguin_tfx")
CSV = os.path.join(PENGUIN_TFX, "penguins_processed.csv")
MODULE = os.path.join(PENGUIN_TFX, "penguin_utils_keras.py")
# TFX's anchor: TrainArgs(num_steps=20) and EvalArgs(num_steps=5) for the Tuner's
# trials; 100 training steps and 5 eval steps for the Trainer.
OURS_FLAGS = (
    "--tuner_train_steps=20",
    "--tuner_eval_steps=5",
    "--train_steps=100",
    "--eval_steps=5",
    "--no_progress",
)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sittings", type=int, default=3)
    p.add_argument("--anchor_venv", default=ANCHOR_VENV)
    p.add_argument("--result_name", default="tfx_penguin_2cores")
    a = p.parse_args()
    tfx_python = os.path.join(a.anchor_venv, "bin", "python")
    if not os.path.exists(tfx_python):
        sys.exit(f"No TFX anchor at {a.anchor_venv}; run sh {ANCHORS}/setup_tfx_anchor.sh DIR")
    work = tempfile.mkdtemp(prefix="tfx_penguin_")
    data = os.path.join(work, "data")
    os.makedirs(data)
    shutil.copy(CSV, data)  # CsvExampleGen reads every CSV file of a folder
    runs = []
    for sitting in range(a.sittings):
        out = os.path.join(work, f"tfx{sitting}")
        tfx_cmd = [tfx_python, os.path.join(ANCHORS, "tfx_anchor.py"), "--data", data]
        tfx_cmd += ["--module", "penguin", "--tune", "--out", out]
        root = os.path.join(work, f"ours{sitting}")
        ours_cmd = [sys.executable, "-m", "beam_pipeline", f"--data={CSV}"]
        ours_cmd += [f"--module_file={MODULE}", f"--pipeline_root={root}", *OURS_FLAGS]
        pair = {}
        for name, cmd in (("tfx", tfx_cmd), ("ours", ours_cmd)):
            log = os.path.join(work, f"{name}{sitting}.log")
            m = _measure.run_measured(cmd, log_path=log, cwd=REPO, timeout_s=1800)
            m.pop("rss_timeline_mib", None)
            if m["rc"] != 0:
                with open(log) as f:
                    sys.exit(f"{name} failed (exit {m['rc']}):\n{f.read()[-3000:]}")
            pair[name] = m
            print(f"sitting {sitting + 1}: {name} {m['wall_s']} s", flush=True)
        pair["ratio"] = round(pair["tfx"]["wall_s"] / pair["ours"]["wall_s"], 2)
        runs.append(pair)
    ratios = [r["ratio"] for r in runs]
    result = {
        "benchmark": "tfx_penguin",
        "what": "TFX's penguin module (6 trials x 20 steps, 100 training steps), TFX 1.16 "
        "against ours, whole-process wall time, alternated",
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": _measure.machine_info(),
        "ours_flags": list(OURS_FLAGS),
        "ratio_median": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "tfx_wall_s": [r["tfx"]["wall_s"] for r in runs],
        "ours_wall_s": [r["ours"]["wall_s"] for r in runs],
        "runs": runs,
    }
    text = json.dumps(result, indent=1)
    # No path of this machine in a committed file: the folders become placeholders.
    text = text.replace(work, "<work>").replace(REPO, "<repo>").replace(a.anchor_venv, "<anchor>")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    path = os.path.join(HERE, "results", f"{a.result_name}_{stamp}.json")
    with open(path, "w") as f:
        f.write(text + "\n")
    print(f"TFX / ours: median {result['ratio_median']}x, range {result['ratio_range']}; {path}")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
