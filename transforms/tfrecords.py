"""Writing batches of serialized records as sharded gzip TFRecord files.

Why not Beam's ``WriteToTFRecord``: it takes one element per record and frames each one
in Python (about 14 µs a record here, most of ExampleGen's time at 1M rows). This sink
takes *lists* of records (one per RecordBatch) and writes them with TensorFlow's C++
``TFRecordWriter``. It keeps Beam's safety: each bundle writes its own temporary file,
and only the files of committed bundles (gathered after a combine, so outputs of failed
or retried attempts are never seen) are renamed to ``data-SSSSS-of-NNNNN.tfrecord.gz``;
leftovers of failed attempts are deleted.

Example::

    serialized_lists | WriteTFRecordBatches("out/train")   # out/train/data-*.tfrecord.gz
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

__all__ = ["WriteTFRecordBatches", "SHARD_SUFFIX"]

SHARD_SUFFIX = ".tfrecord.gz"
# zlib level 1: a third of the default level's (6) time for files about 20% larger; the
# examples are intermediate artifacts, rewritten by every run, so speed wins.
_GZIP_LEVEL = 1


def _options():
    import tensorflow as tf

    return tf.io.TFRecordOptions(compression_type="GZIP", compression_level=_GZIP_LEVEL)


class _WriteBundleFiles(beam.DoFn):
    """Writes every record list of a bundle into one temporary gzip TFRecord file."""

    def __init__(self, tmp_dir: str):
        self._tmp_dir = tmp_dir

    def start_bundle(self):
        self._writer = None
        self._path = None

    def process(self, records: Iterable[bytes]):
        if self._writer is None:
            import tensorflow as tf

            tf.io.gfile.makedirs(self._tmp_dir)
            self._path = FileSystems.join(self._tmp_dir, f"{uuid.uuid4().hex}{SHARD_SUFFIX}")
            self._writer = tf.io.TFRecordWriter(self._path, options=_options())
        write = self._writer.write
        for record in records:
            write(record)

    def finish_bundle(self):
        if self._writer is not None:
            self._writer.close()
            yield WindowedValue(self._path, GlobalWindow().max_timestamp(), [GlobalWindow()])


def _finalize(paths: list[str], out_dir: str, tmp_dir: str) -> list[str]:
    """Renames committed temporary files to their shard names; removes the rest."""
    import tensorflow as tf

    paths = sorted(paths)
    tf.io.gfile.makedirs(out_dir)
    if not paths:
        # An empty split still gets one (empty) file so readers' globs match.
        empty = FileSystems.join(out_dir, f"data-00000-of-00001{SHARD_SUFFIX}")
        tf.io.TFRecordWriter(empty, options=_options()).close()
        paths, final = [], [empty]
    else:
        final = [
            FileSystems.join(out_dir, f"data-{i:05d}-of-{len(paths):05d}{SHARD_SUFFIX}")
            for i in range(len(paths))
        ]
    for src, dst in zip(paths, final):
        tf.io.gfile.rename(src, dst, overwrite=True)
    if tf.io.gfile.exists(tmp_dir):
        tf.io.gfile.rmtree(tmp_dir)  # files of failed or retried bundles
    return final


class WriteTFRecordBatches(beam.PTransform[beam.PCollection, beam.PCollection]):
    """Writes lists of serialized records to ``<out_dir>/data-*.tfrecord.gz``.

    Returns a PCollection with one element: the list of files written.
    """

    def __init__(self, out_dir: str):
        super().__init__()
        self._out_dir = out_dir
        self._tmp_dir = FileSystems.join(out_dir, f".tmp-{uuid.uuid4().hex[:8]}")

    def expand(self, record_lists):
        return (
            record_lists
            | "WriteBundles" >> beam.ParDo(_WriteBundleFiles(self._tmp_dir))
            | "Gather" >> beam.combiners.ToList()
            | "Finalize" >> beam.Map(_finalize, self._out_dir, self._tmp_dir)
        )
