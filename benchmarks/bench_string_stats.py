#!/usr/bin/env python3
"""CPU cost of the string statistics on a column whose values are all distinct (the worst
case for exact unique counts and top values: one Beam element per value).

  PYTHONPATH=<tree> .venv/bin/python benchmarks/bench_string_stats.py N [--mode in_memory]

Runs, in this process, a pipeline on the DirectRunner's FnApiRunner: the batch starts
are created, a Map makes 8,192-row RecordBatches of one list<binary> column ``id`` holding
id0000000, id0000001, ... (made on the workers: a Create of the data would pickle it into
the pipeline), and GenerateStatistics("train") of the tree on PYTHONPATH summarises them.
Prints the reported unique count, the wall seconds and the CPU seconds of this process
(time.process_time: the in_memory mode runs the SDK worker in this process's threads, so
that is the job's CPU; on a shared machine compare CPU seconds, not wall). Run it with
PYTHONPATH set to each tree to compare two versions.
"""

from __future__ import annotations

import argparse
import time

import apache_beam as beam
import pyarrow as pa
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.runtime.options import create_pipeline
from transforms import statistics as st

BATCH_ROWS = 8192


def _batch(start: int, n: int) -> pa.RecordBatch:
    ids = [[f"id{j:07d}".encode()] for j in range(start, min(start + BATCH_ROWS, n))]
    return pa.RecordBatch.from_arrays([pa.array(ids, pa.list_(pa.binary()))], names=["id"])


def _unique(stats) -> int:
    return int(stats.datasets[0].features[0].string_stats.unique)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("rows", type=int)
    ap.add_argument("--mode", default="in_memory", help="--direct_running_mode")
    a = ap.parse_args()
    t0, c0 = time.time(), time.process_time()
    p = create_pipeline(PipelineOptions([f"--direct_running_mode={a.mode}"]))
    _ = (
        p
        | beam.Create(list(range(0, a.rows, BATCH_ROWS)))
        | beam.Map(_batch, a.rows)
        | st.GenerateStatistics("train")
        | beam.Map(lambda s: print("unique", _unique(s), flush=True))
    )
    p.run().wait_until_finish()
    wall, cpu = time.time() - t0, time.process_time() - c0
    print(f"rows {a.rows} mode {a.mode} wall_s {wall:.1f} cpu_s {cpu:.1f}")


if __name__ == "__main__":
    main()
