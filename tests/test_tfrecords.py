"""The batched TFRecord sink: every record once, shard names, empty splits, no leftovers."""

from __future__ import annotations

import os

import apache_beam as beam
import pytest
from conftest import make_pipeline

from transforms.tfrecords import WriteTFRecordBatches


def _read(pattern):
    import glob

    import tensorflow as tf

    files = sorted(glob.glob(pattern))
    return files, [r.numpy() for f in files for r in tf.data.TFRecordDataset(f, "GZIP")]


@pytest.mark.parametrize("n_lists, per_list", [(0, 0), (1, 3), (40, 25)])
def test_every_record_is_written_once(tmp_path, n_lists, per_list):
    out = str(tmp_path / "split")
    lists = [[f"{i}-{j}".encode() for j in range(per_list)] for i in range(n_lists)]
    with make_pipeline() as p:
        _ = p | beam.Create(lists) | WriteTFRecordBatches(out)
    files, records = _read(os.path.join(out, "*.tfrecord.gz"))
    assert sorted(records) == sorted(r for rs in lists for r in rs)
    assert files, "an empty split still gets one (empty) file so readers' globs match"
    n = len(files)
    assert [os.path.basename(f) for f in files] == [
        f"data-{i:05d}-of-{n:05d}.tfrecord.gz" for i in range(n)
    ]
    # No temporary folder (bundle files before finalization) is left behind.
    assert sorted(os.listdir(out)) == sorted(os.path.basename(f) for f in files)
