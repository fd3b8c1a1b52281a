"""Transform decodes the train split once: the analysis spills its decoded batches and the
transform pass reads them back (transforms/tfrecords.py's spill, transforms/transform.py),
on real Beam, tf.Transform and TensorFlow."""

from __future__ import annotations

import glob
import json
import os
import sys

import apache_beam as beam
import numpy as np
import pytest
from conftest import make_pipeline

from transforms.example_encoding import frame_records
from transforms.tfrecords import _GzipRecordWriter


def _example(i: int, s: str) -> bytes:
    import tensorflow as tf

    feature = {
        "i": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
        "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[s.encode()])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _write(path, rows) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    writer = _GzipRecordWriter(path)
    if rows:
        writer.write(frame_records([_example(i, s) for i, s in rows]))
    writer.close()
    return path


def _schema():
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = schema_pb2.Schema()
    schema.feature.add(name="i", type=schema_pb2.INT)
    schema.feature.add(name="s", type=schema_pb2.BYTES)
    return schema


def _rows_of(batch) -> list:
    return [[r["i"][0], r["s"][0].decode()] for r in batch.to_pylist()]


def test_a_spilled_read_is_read_again_from_its_spill_not_from_its_files(tmp_path):
    """A read with a spill folder gives each file's batches and one (file, spill) pair per
    file; a later read given those pairs gives the same batches from the spill alone (the
    files are deleted first). A file without records spills nothing and reads as nothing."""
    from transforms.tfrecords import ReadExampleBatches

    rows = {
        "a": [(i, "x" * (i % 4)) for i in range(25)],
        "empty": [],
        "b": [(100 + i, "y") for i in range(7)],
    }
    files = [_write(str(tmp_path / "ex" / f"{k}.tfrecord.gz"), v) for k, v in rows.items()]
    spill_dir, out = str(tmp_path / "spill"), tmp_path / "out"
    out.mkdir()

    def dump(name):
        def write(values):
            with open(out / name, "w") as f:
                json.dump(values, f)

        return write

    with make_pipeline() as p:
        read = p | ReadExampleBatches(files, _schema(), batch_size=10, spill_dir=spill_dir)
        _ = (
            read.batches
            | beam.Map(_rows_of)
            | "Rows" >> beam.combiners.ToList()
            | ("WriteRows" >> beam.Map(dump("first.json")))
        )
        _ = (
            read.spilled
            | "Pairs" >> beam.combiners.ToList()
            | ("WritePairs" >> beam.Map(dump("pairs.json")))
        )
    pairs = dict(json.loads((out / "pairs.json").read_text()))
    assert sorted(pairs) == sorted(files)
    assert pairs[files[1]] is None, "a file without records has no spill"
    assert sorted(os.listdir(spill_dir)) == sorted(
        os.path.basename(pairs[f]) for f in (files[0], files[2])
    )
    for f in files:
        os.remove(f)
    with make_pipeline() as p:
        spilled = p | "Spilled" >> beam.Create(sorted(pairs.items()))
        again = p | ReadExampleBatches(files, _schema(), batch_size=10, spilled=spilled)
        _ = again | beam.Map(_rows_of) | beam.combiners.ToList() | beam.Map(dump("again.json"))

    def batches(path):
        # Each batch is one element: a list of its rows.
        return sorted(json.loads((out / path).read_text()))

    assert batches("again.json") == batches("first.json")
    assert sorted(map(len, batches("first.json"))) == [5, 7, 10, 10]
    expected = [[i, s] for i, s in rows["a"] + rows["b"]]
    assert sorted(r for batch in batches("first.json") for r in batch) == sorted(expected)


def _preprocessing_fn(inputs):
    import tensorflow as tf
    import tensorflow_transform as tft

    i = tf.sparse.to_dense(inputs["i"])[:, 0]
    s = tf.sparse.to_dense(inputs["s"], default_value="")[:, 0]
    return {
        "i": i,
        "z": tft.scale_to_z_score(tf.cast(i, tf.float32)),
        "v": tft.compute_and_apply_vocabulary(s),
    }


def _read_transformed(pattern) -> dict[int, tuple[float, int]]:
    import tensorflow as tf

    spec = {
        "i": tf.io.FixedLenFeature([], tf.int64),
        "z": tf.io.FixedLenFeature([], tf.float32),
        "v": tf.io.FixedLenFeature([], tf.int64),
    }
    out = {}
    for record in tf.data.TFRecordDataset(sorted(glob.glob(pattern)), "GZIP"):
        row = tf.io.parse_single_example(record, spec)
        out[int(row["i"])] = (float(row["z"]), int(row["v"]))
    return out


@pytest.mark.parametrize(
    "beam_args",
    [
        ["--direct_running_mode=in_memory"],
        ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    ],
    ids=["in_memory", "multi_processing"],
)
def test_the_transform_pass_reads_the_train_split_from_the_analysis_spill(tmp_path, beam_args):
    """Each train file is decoded once (for the analysis) and read back from its spill by
    the transform pass; the eval file is decoded by the transform pass. Every row of both
    splits comes out transformed with the train split's statistics and vocabulary."""
    import tensorflow_transform.beam as tft_beam

    from beam_pipeline.core.types import Split
    from beam_pipeline.core.user_module import pickle_by_value
    from beam_pipeline.runtime.jobs import counter
    from beam_pipeline.stages.transform.executor import build_transform_pipeline

    token = lambda i: "a" if i % 5 == 0 else "bc"[i % 2]  # noqa: E731  a < c < b in count
    train = [[(i, token(i)) for i in range(f * 40, f * 40 + 30)] for f in range(2)]
    evals = [(1000 + i, "c") for i in range(9)]
    for n, rows in enumerate(train):
        _write(str(tmp_path / "ex" / "train" / f"data-{n}.tfrecord.gz"), rows)
    _write(str(tmp_path / "ex" / "eval" / "data-0.tfrecord.gz"), evals)
    examples = {s: str(tmp_path / "ex" / s.value / "*") for s in (Split.TRAIN, Split.EVAL)}
    out = str(tmp_path / "transformed")
    # tf.Transform's workers trace the preprocessing_fn too: sent by value, as a module
    # file's is (the test module is not on their path).
    pickle_by_value(sys.modules[__name__])
    with tft_beam.Context(temp_dir=str(tmp_path / "tmp")):
        p = make_pipeline(*beam_args)
        spill_dir = build_transform_pipeline(
            p, examples, _schema(), _preprocessing_fn, "m.py", "", None,
            str(tmp_path / "graph"), out,
        )  # fmt: skip
        result = p.run()
        result.wait_until_finish()
    assert counter(result, "read.files_decoded") == 3  # 2 train files, once; 1 eval file
    assert counter(result, "read.files_from_spill") == 2
    assert len(glob.glob(os.path.join(spill_dir, "*.arrow"))) == 2

    rows = [r for rs in train for r in rs]
    values = np.array([i for i, _ in rows], dtype=np.float32)
    counts: dict[str, int] = {}
    for _, s in rows:
        counts[s] = counts.get(s, 0) + 1
    # tf.Transform's vocabulary: by frequency, ties by the token, descending.
    vocab = sorted(counts, key=lambda s: (counts[s], s), reverse=True)
    for split, split_rows in ((Split.TRAIN, rows), (Split.EVAL, evals)):
        got = _read_transformed(os.path.join(out, split.value, "*"))
        assert sorted(got) == sorted(i for i, _ in split_rows)
        for i, s in split_rows:
            z, v = got[i]
            assert z == pytest.approx((i - values.mean()) / values.std(), rel=1e-4), (split, i)
            assert v == vocab.index(s), (split, i, s)
