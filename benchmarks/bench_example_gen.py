#!/usr/bin/env python3
"""Times the data phase alone (ExampleGen + Statistics, one Beam job) on CSV input.

  python benchmarks/bench_example_gen.py DATA [--beam_args="--direct_running_mode=..."]
      [--repeat N] [--json] [--no_fork_server]

Builds the job with the orchestrator's own builder (``build_data_pipeline``) into a fresh
temporary folder and times ``run().wait_until_finish()`` only: the launcher's checks
(header, content fingerprint) are not timed, nor Transform (use bench_data_stages.py for
the whole data phase). Prints one line per repeat with the 1-minute load average before
and after (the machine may be shared: a figure means little without it), the CPU seconds
of this process and its worker processes (forks of the fork server are its children, not
this process's: with it, the workers' CPU is not counted), the rows
read/written/rejected and the example shards written per split; ``--json`` prints each
repeat as one JSON object instead (what ``bench_scaling.py`` reads).

In ``multi_processing`` mode the workers are forks of the pool's fork server, as in a CLI
run, which warms it first thing (``warm_fork_server``); the wait for it is not timed
(``fork_server_wait_s``). ``--no_fork_server``: Beam's own fresh worker interpreters
(what the figures before 2026-11-24 measured: at 8 workers on 16 cores they cost about
4.5 s of a 1000-row job, against 1.9 s with one worker).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shlex
import shutil
import tempfile
import time


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (workers)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _warm_fork_server(options) -> float:
    """As the CLI does first thing in multi_processing mode (``warm_fork_server``): the
    workers start as forks of the pool's fork server, not as fresh interpreters. Waits
    until it is warm (untimed: in a CLI run it warms while the launcher checks its
    inputs); returns the seconds waited."""
    from beam_pipeline.runtime.options import is_multi_processing
    from beam_pipeline.runtime.pool import fork_server_warm, warm_fork_server

    if not is_multi_processing(options):
        return 0.0
    t0 = time.perf_counter()
    warm_fork_server()
    while not fork_server_warm() and time.perf_counter() - t0 < 300:
        time.sleep(0.05)
    return time.perf_counter() - t0


def _run_once(data: str, beam_args: list[str], fork_server: bool = True) -> dict:
    from beam_pipeline.config import DataConfig, PipelineConfig
    from beam_pipeline.core.types import Artifact
    from beam_pipeline.runtime.jobs import counter
    from beam_pipeline.runtime.options import create_pipeline, parse_beam_args
    from beam_pipeline.stages.example_gen.executor import build_data_pipeline, check_data
    from transforms import example_gen as eg

    config = PipelineConfig(data=DataConfig(data=data))
    d = config.data
    csv_format = eg.CsvFormat(d.csv_delimiter, d.csv_null_values, d.csv_max_field_bytes)
    inputs = check_data(config, csv_format)
    root = tempfile.mkdtemp(prefix="bench_eg_")
    try:
        staging = {a: os.path.join(root, a.value) for a in Artifact}
        options = parse_beam_args(beam_args)
        warm_s = _warm_fork_server(options) if fork_server else 0.0
        p = create_pipeline(options)
        build_data_pipeline(p, config, inputs, csv_format, None, staging)
        load0 = os.getloadavg()[0]
        cpu0 = _cpu_seconds()
        t0 = time.perf_counter()
        result = p.run()
        result.wait_until_finish()
        seconds = time.perf_counter() - t0
        cpu = _cpu_seconds() - cpu0
        load1 = os.getloadavg()[0]
        read = counter(result, "example_gen.rows_read")
        rejected = counter(result, "example_gen.rows_rejected")
        out = {s.value: counter(result, f"example_gen.rows_out.{s.value}") for s in d.splits}
        shards = {
            s.value: len(glob.glob(os.path.join(staging[Artifact.EXAMPLES], s.value, "data-*")))
            for s in d.splits
        }
        ranges = counter(result, "example_gen.csv_ranges")
        return {
            "seconds": round(seconds, 2),
            "cpu_s": round(cpu, 2),
            "load_before": round(load0, 2),
            "load_after": round(load1, 2),
            "rows_read": read,
            "rows_out": out,
            "rows_rejected": rejected,
            "shards": shards,
            "csv_ranges": ranges,
            "fork_server_wait_s": round(warm_s, 2),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("data")
    ap.add_argument("--beam_args", default="--runner=DirectRunner")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON object per repeat")
    ap.add_argument(
        "--no_fork_server",
        action="store_true",
        help="multi_processing workers as Beam starts them (fresh interpreters), not as "
        "forks of the warm fork server the CLI starts first thing",
    )
    a = ap.parse_args()
    for _ in range(a.repeat):
        r = _run_once(a.data, shlex.split(a.beam_args), fork_server=not a.no_fork_server)
        if a.json:
            print(json.dumps(r), flush=True)
            continue
        print(
            f"{a.beam_args}: {r['seconds']:.1f} s (CPU {r['cpu_s']:.1f} s)  "
            f"load {r['load_before']:.1f}->{r['load_after']:.1f}  read {r['rows_read']} "
            f"out {r['rows_out']} rejected {r['rows_rejected']}  shards {r['shards']}  "
            f"csv ranges {r['csv_ranges']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
