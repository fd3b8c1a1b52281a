"""The TFRecord input format: (optionally gzip) TFRecord files of ``tf.train.Example``.

Records are read with Beam's ``ReadAllFromTFRecord``, batched, and decoded into Arrow
RecordBatches by tfx-bsl's C++ decoder (typed by the user's schema when there is one);
a record that does not decode is rejected with its file, not dropped.

Example::

    with beam.Pipeline() as p:
        result = p | ReadTFRecordExamples(files, HashSplitter())
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Optional

import apache_beam as beam

from transforms.example_gen.input_format import (
    CHUNK_ROWS,
    ExampleGenResult,
    InputFormat,
    RejectedRow,
)
from transforms.example_gen.splitting import HashSplitter, split_batch, split_counters
from transforms.metrics import NAMESPACE

__all__ = ["ReadTFRecordExamples", "TFRecordInput"]


class _DecodeExamples(beam.DoFn):
    """Decodes serialized tf.Examples with tfx-bsl; rejects records that do not decode."""

    def __init__(self, splitter: HashSplitter, schema_bytes: Optional[bytes]):
        self._splitter = splitter
        self._schema_bytes = schema_bytes
        self._read = beam.metrics.Metrics.counter(NAMESPACE, "example_gen.rows_read")
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, "example_gen.rows_rejected")
        self._written = split_counters(splitter)

    def setup(self):
        from tfx_bsl.coders import example_coder

        self._decoder = (
            example_coder.ExamplesToRecordBatchDecoder(self._schema_bytes)
            if self._schema_bytes
            else example_coder.ExamplesToRecordBatchDecoder()
        )

    def process(self, element: tuple[str, list[bytes]]) -> Iterator:
        path, records = element
        self._read.inc(len(records))
        try:
            batch = self._decoder.DecodeBatch(records)
        except Exception:  # noqa: BLE001  find the bad records one by one
            good = []
            for _i, r in enumerate(records):
                try:
                    self._decoder.DecodeBatch([r])
                    good.append(r)
                except Exception as e:  # noqa: BLE001
                    self._rejected.inc()
                    yield beam.pvalue.TaggedOutput(
                        "rejected",
                        RejectedRow(
                            path, -1, f"record is not a valid tf.Example ({e})", r[:200].hex()
                        ),
                    )
            if not good:
                return
            records = good
            batch = self._decoder.DecodeBatch(records)
        if self._splitter.partition_feature:
            col = batch.column(batch.schema.get_field_index(self._splitter.partition_feature))
            keys = [json.dumps(v).encode() for v in col.to_pylist()]
        else:
            keys = records
        yield from split_batch(batch, keys, self._splitter, self._written)


class ReadTFRecordExamples(beam.PTransform[beam.pvalue.PBegin, ExampleGenResult]):
    """Reads (optionally gzip) TFRecord files of tf.Example into RecordBatches per split."""

    def __init__(self, files: Sequence[str], splitter: HashSplitter, schema_bytes=None):
        super().__init__()
        self._files = list(files)
        self._splitter = splitter
        self._schema_bytes = schema_bytes

    def expand(self, pbegin):
        decoded = (
            pbegin
            | "ListFiles" >> beam.Create(self._files)
            | "ReadRecords" >> beam.io.ReadAllFromTFRecord(with_filename=True)
            | "Batch" >> beam.GroupIntoBatches(CHUNK_ROWS)
            | "Decode"
            >> beam.ParDo(_DecodeExamples(self._splitter, self._schema_bytes)).with_outputs(
                "rejected", main="batches"
            )
        )
        return ExampleGenResult(decoded.batches, decoded.rejected)


class TFRecordInput(InputFormat):
    """TFRecord files of tf.Example (``*.tfrecord*``, ``.tfr``, ``.rio``; optionally gzip)."""

    title = "TFRecord"
    suffix = ".tfrecord"

    def claims(self, name: str) -> bool:
        return ".tfrecord" in name or name.endswith((".tfr", ".rio"))

    def read(self, files, columns, splitter, settings) -> ReadTFRecordExamples:
        """:meth:`InputFormat.read` (the arguments' types are the base's)."""
        schema = settings.schema
        return ReadTFRecordExamples(
            files, splitter, schema.SerializeToString() if schema is not None else None
        )
