#!/usr/bin/env python3
"""Times the reading of gzip TFRecord files of tf.Examples into batches of serialized
records, alternated: TensorFlow's reader (``TFRecordDataset(..., "GZIP").batch(n)``, what
``ReadExampleBatches`` used) against ``transforms.tfrecords._framed_batches`` (ISA-L's
inflate and the framing in numpy: what it uses), then the same with the parse into Arrow
RecordBatches that follows (the reader's whole step), on the examples of a finished run.

  python benchmarks/bench_read_examples.py RUN_DIR [--files 3] [--repeat 3]

RUN_DIR is ``<pipeline_root>/runs/<run_id>`` with ``examples/train/`` and ``schema/``
(e.g. from ``bench_data_stages.py --keep``). Prints CPU and wall seconds per side and
repeat, and checks that both sides give the same batches.

  python benchmarks/bench_read_examples.py RUN_DIR --spill [--files 3] [--repeat 3]

times what Transform's two passes pay per file instead: the analysis's read, decoding the
files and spilling their batches (``ReadExampleBatches(spill_dir=...)``), against the
transform pass's read of those spills; CPU seconds include the reader's threads.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=16384)
    parser.add_argument("--spill", action="store_true")
    args = parser.parse_args()
    if args.spill:
        _spill(args)
        return

    import tensorflow as tf

    from beam_pipeline.engine.artifacts import Schema
    from transforms.tfrecords import _DecodeFile, _framed_batches

    files = sorted(glob.glob(os.path.join(args.run_dir, "examples", "train", "*")))
    files = files[: args.files]
    schema = Schema.read_file(os.path.join(args.run_dir, "schema", "schema.pbtxt"))
    decode = _DecodeFile(schema.SerializeToString(), args.batch_size)
    decode.setup()
    parse = decode._parse if decode._fast is not None else decode._decode

    def tensorflow_reader(path):
        return tf.data.TFRecordDataset(path, compression_type="GZIP").batch(args.batch_size)

    def ours(path):
        return _framed_batches(path, args.batch_size)

    sides = (("tensorflow", tensorflow_reader), ("ours", ours))
    for then_parse in (False, True):
        what = "records + parse" if then_parse else "records"
        for repeat in range(args.repeat):
            for name, read in sides:
                cpu, wall = time.process_time(), time.perf_counter()
                for path in files:
                    for records in read(path):
                        if then_parse:
                            parse(records)
                print(
                    f"{what}, repeat {repeat + 1}, {name}: cpu "
                    f"{time.process_time() - cpu:.2f} s, wall {time.perf_counter() - wall:.2f} s"
                )
    same = all(
        [b.numpy().tolist() for b in tensorflow_reader(path)]
        == [b.numpy().tolist() for b in ours(path)]
        for path in files
    )
    print(f"files {len(files)}, same batches: {same}")
    decode.teardown()


def _spill(args) -> None:
    import resource
    import shutil
    import tempfile

    import pyarrow as pa

    from beam_pipeline.engine.artifacts import Schema
    from transforms.tfrecords import SPILLED, _DecodeFile, _read_spill

    def cpu() -> float:  # every thread of this process
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    files = sorted(glob.glob(os.path.join(args.run_dir, "examples", "train", "*")))
    files = files[: args.files]
    schema = Schema.read_file(os.path.join(args.run_dir, "schema", "schema.pbtxt"))
    for repeat in range(args.repeat):
        spill_dir = tempfile.mkdtemp(prefix="bench_spill_")
        try:
            decode = _DecodeFile(schema.SerializeToString(), args.batch_size, spill_dir)
            decode.setup()
            cpu0, wall = cpu(), time.perf_counter()
            decoded, spills = [], {}
            for path in files:
                for out in decode.process(path):
                    if getattr(out, "tag", None) == SPILLED:
                        spills[out.value[0]] = out.value[1]
                    else:
                        decoded.append(out)
            print(
                f"repeat {repeat + 1}, decode and spill: cpu {cpu() - cpu0:.2f} s, "
                f"wall {time.perf_counter() - wall:.2f} s, "
                f"{sum(b.num_rows for b in decoded)} rows"
            )
            cpu0, wall = cpu(), time.perf_counter()
            again = [b for path in files for b in _read_spill(spills[path])]
            print(
                f"repeat {repeat + 1}, read the spill: cpu {cpu() - cpu0:.2f} s, "
                f"wall {time.perf_counter() - wall:.2f} s, "
                f"{sum(os.path.getsize(p) for p in spills.values()) / 1e6:.0f} MB spilled"
            )
            decode.teardown()
            assert len(again) == len(decoded) and all(map(pa.RecordBatch.equals, again, decoded))
        finally:
            shutil.rmtree(spill_dir, ignore_errors=True)
    print(f"files {len(files)}, same batches: True")


if __name__ == "__main__":
    main()
