#!/usr/bin/env python3
"""Times the Transform job alone on the examples and schema of a finished run.

  python benchmarks/bench_transform.py RUN_DIR --module_file M [--beam_args="..."]
      [--repeat N] [--profile OUT.prof] [--analyze_only]

RUN_DIR is ``<pipeline_root>/runs/<run_id>`` of a run that wrote examples and a schema
(e.g. ``bench_data_stages.py --keep`` or the CLI with ``--no_trainer --no_tuner``).
Builds the job with the stage's own builder (``build_transform_pipeline``), without the
analyzer cache (every repeat analyzes), into a fresh temporary folder, and times
``run().wait_until_finish()``. Prints one line per repeat: wall seconds, CPU seconds of
this process and its finished worker processes, and the 1-minute load average before and
after (the machine may be shared: a figure means little without it). ``--profile``
writes cProfile statistics of the launcher process (with ``time.process_time``, so
others' load does not inflate them; meaningful on ``in_memory``, where the job runs in
this process). ``--analyze_only`` builds only the analysis (the transform graph), to
split the job's time into its analysis and transform passes. In ``multi_processing``
mode the fork server is warmed first, as a CLI run does: the workers are its forks.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import shlex
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children (workers)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _build(
    run_dir: str,
    module_file: str,
    beam_args: list[str],
    root: str,
    analyze_only: bool,
    analyzer_cache: bool = False,
):
    import tensorflow_transform.beam as tft_beam

    from beam_pipeline.core.types import Split
    from beam_pipeline.core.user_module import get_preprocessing_fn, load_module
    from beam_pipeline.engine.artifacts import Schema
    from beam_pipeline.runtime.options import create_pipeline, parse_beam_args
    from beam_pipeline.stages.transform.executor import build_transform_pipeline

    schema = Schema.read_file(os.path.join(run_dir, "schema", "schema.pbtxt"))
    fn = get_preprocessing_fn(load_module(module_file), module_file)
    examples = {
        s: os.path.join(run_dir, "examples", s.value, "*")
        for s in Split
        if glob.glob(os.path.join(run_dir, "examples", s.value, "*"))
    }
    p = create_pipeline(parse_beam_args(beam_args))
    if analyze_only:
        # tf.Transform's analysis of the train split as TransformExamples reads it (its
        # batches of BATCH_SIZE rows), without the transform pass (which TransformExamples
        # always wires).
        from tfx_bsl.public import tfxio

        from transforms.tfrecords import ReadExampleBatches
        from transforms.transform import BATCH_SIZE

        train = examples[Split.TRAIN]
        data = p | "Read" >> ReadExampleBatches(sorted(glob.glob(train)), schema, BATCH_SIZE)
        config = tfxio.TFExampleRecord(train, schema=schema).TensorAdapterConfig()
        transform_fn = (data, config) | "Analyze" >> tft_beam.AnalyzeDataset(fn)
        _ = transform_fn | tft_beam.WriteTransformFn(os.path.join(root, "graph"))
    else:
        build_transform_pipeline(
            p,
            examples,
            schema,
            fn,
            module_file,
            "bench",
            os.path.join(root, "cache") if analyzer_cache else None,
            os.path.join(root, "graph"),
            os.path.join(root, "transformed"),
        )
    return p


def _record(args, wall: float, build_s: float, load0: float) -> None:
    """Appends one repeat to ``benchmarks/results/<--result_name>.json``: the job's wall
    time (in multi_processing its workers' CPU is not this process's, so CPU is left out)."""
    import datetime
    import json

    import _measure

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    path = os.path.join(path, f"{args.result_name}.json")
    runs = []
    if os.path.exists(path):
        with open(path) as f:
            runs = json.load(f)["runs"]
    runs.append(
        {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "beam_args": args.beam_args,
            "analyze_only": args.analyze_only,
            "wall_s": round(wall, 2),
            "build_s": round(build_s, 2),
            "loadavg_before": round(load0, 2),
            "machine": _measure.machine_info(),
        }
    )
    with open(path, "w") as f:
        json.dump({"benchmark": "transform_job", "runs": runs}, f, indent=1)


def _warm_fork_server() -> None:
    """As a CLI run in multi_processing mode does before its Transform job: the workers
    then start as forks of the warm fork server (Transform's modules imported once), not
    as fresh interpreters that import TensorFlow and tf.Transform each (which a CLI run's
    workers would only be while the server is still warming)."""
    from beam_pipeline.core.forked import WORKER_MODULES_ENV, fork_server_warm, warm_fork_server

    os.environ[WORKER_MODULES_ENV] = "transforms.transform"
    warm_fork_server()
    deadline = time.monotonic() + 300
    while not fork_server_warm() and time.monotonic() < deadline:
        time.sleep(0.1)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("run_dir")
    ap.add_argument("--module_file", required=True)
    ap.add_argument("--beam_args", default="", help='one string, e.g. "--direct_num_workers=2"')
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--profile", default=None, help="write cProfile stats here")
    ap.add_argument("--analyze_only", action="store_true")
    ap.add_argument(
        "--analyzer_cache",
        action="store_true",
        help="write tf.Transform's analyzer cache (into a fresh folder), as a CLI run does",
    )
    ap.add_argument(
        "--result_name",
        default=None,
        help="also append each repeat to benchmarks/results/<this>.json (a list of runs)",
    )
    args = ap.parse_args()

    import tensorflow_transform.beam as tft_beam

    if "multi_processing" in args.beam_args:
        _warm_fork_server()
    for i in range(args.repeat):
        root = tempfile.mkdtemp(prefix="bench_tft_")
        try:
            with tft_beam.Context(temp_dir=os.path.join(root, "tmp")):
                load0 = os.getloadavg()[0]
                cpu0, t0 = _cpu_seconds(), time.perf_counter()
                profiler = None
                if args.profile:
                    import cProfile

                    profiler = cProfile.Profile(time.process_time)
                    profiler.enable()
                p = _build(
                    args.run_dir,
                    args.module_file,
                    shlex.split(args.beam_args),
                    root,
                    args.analyze_only,
                    args.analyzer_cache,
                )
                build_s = time.perf_counter() - t0
                p.run().wait_until_finish()
                if profiler is not None:
                    profiler.disable()
                    profiler.dump_stats(args.profile)
                wall = time.perf_counter() - t0
                cpu = _cpu_seconds() - cpu0
            print(
                f"run {i + 1}: wall {wall:.1f} s (build {build_s:.1f} s), cpu {cpu:.1f} s, "
                f"load {load0:.2f} -> {os.getloadavg()[0]:.2f}",
                flush=True,
            )
            if args.result_name:
                _record(args, wall, build_s, load0)
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
