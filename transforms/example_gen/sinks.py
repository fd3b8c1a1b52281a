"""ExampleGen's outputs: tf.Examples per split as sharded gzip TFRecords, and rejected rows.

Example::

    result.batches | WriteSplitExamples("out/examples", (Split.TRAIN, Split.EVAL))
    result.rejected | WriteRejectedRows("out/rejected")   # rejected-*.jsonl
"""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam

from beam_pipeline.core import fileio
from beam_pipeline.core.types import Split
from transforms.example_encoding import encode_framed
from transforms.rows import RejectedRow, SplitBatch, batches_of
from transforms.tfrecords import WriteTFRecordBatches

__all__ = ["WriteRejectedRows", "WriteSplitExamples"]


class WriteSplitExamples(beam.PTransform[beam.PCollection[SplitBatch], beam.pvalue.PDone]):
    """Writes each split as sharded gzip TFRecords ``<out_dir>/<split>/data-*.tfrecord.gz``."""

    def __init__(self, out_dir: str, splits: Sequence[Split]):
        super().__init__()
        self._out_dir = out_dir
        self._splits = tuple(splits)

    def expand(self, batches):
        for split in self._splits:
            _ = (
                batches
                | f"Batch[{split.value}]" >> batches_of(split)
                | f"Write[{split.value}]"
                >> WriteTFRecordBatches(
                    fileio.join(self._out_dir, split.value), encode=encode_framed
                )
            )
        return beam.pvalue.PDone(batches.pipeline)


class WriteRejectedRows(beam.PTransform[beam.PCollection[RejectedRow], beam.pvalue.PDone]):
    """Writes rejected rows as JSON lines ``<out_dir>/rejected-*.jsonl`` (file, line, reason)."""

    def __init__(self, out_dir: str):
        super().__init__()
        self._out_dir = out_dir

    def expand(self, rejected):
        _ = (
            rejected
            | "ToJson" >> beam.Map(RejectedRow.to_json)
            | "Write"
            >> beam.io.WriteToText(
                fileio.join(self._out_dir, "rejected"), file_name_suffix=".jsonl"
            )
        )
        return beam.pvalue.PDone(rejected.pipeline)
