#!/usr/bin/env python3
"""Times the write path of tf.Examples alone, alternated, on the first transformed examples
of a finished run: tfx-bsl's encoder with TensorFlow's ``TFRecordWriter`` (what ExampleGen
and Transform used first), ``transforms.example_encoding.encode_framed`` with one zlib call
per batch (what they used next), and ``encode_framed`` with the sinks' own writer (ISA-L's
deflate at the same level: what they use).

  python benchmarks/bench_example_encoding.py RUN_DIR [--rows 102400] [--repeat 3]

RUN_DIR is ``<pipeline_root>/runs/<run_id>`` with ``transformed_examples/`` (e.g. from
``bench_data_stages.py --keep``). Prints CPU seconds per side and repeat, the files' sizes,
and checks that the files hold the same examples.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--rows", type=int, default=102_400)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import tensorflow as tf
    from tfx_bsl.coders import example_coder

    from transforms.example_encoding import encode_framed
    from transforms.tfrecords import _GzipRecordWriter

    files = sorted(glob.glob(os.path.join(args.run_dir, "transformed_examples", "train", "*")))
    data = tf.data.TFRecordDataset(files, compression_type="GZIP").take(args.rows)
    batch = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch([r.numpy() for r in data])
    batches = [batch.slice(i, 4096) for i in range(0, batch.num_rows, 4096)]
    out = tempfile.mkdtemp()
    before, zlib_path, after = (os.path.join(out, f"{n}.gz") for n in ("before", "zlib", "after"))

    def tfx_bsl_and_tf_writer() -> None:
        options = tf.io.TFRecordOptions(compression_type="GZIP", compression_level=1)
        encoder = example_coder.RecordBatchToExamplesEncoder()
        with tf.io.TFRecordWriter(before, options=options) as writer:
            for b in batches:
                for record in encoder.encode(b):
                    writer.write(record)

    def batch_encoder_and_zlib() -> None:
        gzip = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        with open(zlib_path, "wb") as f:
            for b in batches:
                f.write(gzip.compress(encode_framed(b).data))
            f.write(gzip.flush())

    def batch_encoder_and_sink_writer() -> None:
        writer = _GzipRecordWriter(after)
        for b in batches:
            writer.write(encode_framed(b))
        writer.close()

    sides = (
        ("before", tfx_bsl_and_tf_writer),
        ("zlib", batch_encoder_and_zlib),
        ("after", batch_encoder_and_sink_writer),
    )
    for repeat in range(args.repeat):
        for name, write in sides:
            start = time.process_time()
            write()
            print(f"repeat {repeat + 1} {name}: cpu {time.process_time() - start:.3f} s")

    def examples(path):
        return [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type="GZIP")]

    ours, zlib_records, theirs = examples(after), examples(zlib_path), examples(before)
    same = (
        ours == zlib_records
        and len(ours) == len(theirs) == batch.num_rows
        and all(
            tf.train.Example.FromString(a) == tf.train.Example.FromString(b)
            for a, b in zip(ours, theirs)
        )
    )
    sizes = ", ".join(
        f"{name} {os.path.getsize(os.path.join(out, name + '.gz')):,}" for name, _ in sides
    )
    print(f"rows {batch.num_rows}, same examples: {same}, file bytes: {sizes}")


if __name__ == "__main__":
    main()
