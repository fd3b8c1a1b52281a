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
split the job's time into its analysis and transform passes.
"""

from __future__ import annotations

import argparse
import glob
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


def _build(run_dir: str, module_file: str, beam_args: list[str], root: str, analyze_only: bool):
    import tensorflow_transform.beam as tft_beam

    from beam_pipeline.core.types import Split
    from beam_pipeline.core.user_module import get_preprocessing_fn, load_module
    from beam_pipeline.engine.artifacts import Schema
    from beam_pipeline.runtime.options import create_pipeline, parse_beam_args
    from beam_pipeline.stages.transform.executor import build_transform_pipeline
    from transforms.transform import TransformExamples

    schema = Schema.read_file(os.path.join(run_dir, "schema", "schema.pbtxt"))
    fn = get_preprocessing_fn(load_module(module_file), module_file)
    examples = {
        s: os.path.join(run_dir, "examples", s.value, "*")
        for s in Split
        if glob.glob(os.path.join(run_dir, "examples", s.value, "*"))
    }
    p = create_pipeline(parse_beam_args(beam_args))
    if analyze_only:
        result = p | "Transform" >> TransformExamples(examples, schema, fn, None, "")
        _ = result.transform_fn | tft_beam.WriteTransformFn(os.path.join(root, "graph"))
    else:
        build_transform_pipeline(
            p,
            examples,
            schema,
            fn,
            module_file,
            "",
            None,
            os.path.join(root, "graph"),
            os.path.join(root, "transformed"),
        )
    return p


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
    args = ap.parse_args()

    import tensorflow_transform.beam as tft_beam

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
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
