"""The TFRecord input format: (optionally gzip) TFRecord files of ``tf.train.Example``.

Each file is read in order (decompressed by its name's suffix) with Beam's TFRecord framing
(``_TFRecordUtil``, which ``ReadAllFromTFRecord`` uses and which checks each record's
CRC32C), in batches that know their records' numbers, and decoded into Arrow RecordBatches
by tfx-bsl's C++ decoder (typed by the user's schema when there is one). Why not
``ReadAllFromTFRecord`` itself: a damaged file ends its job in Beam's traceback naming
neither the file nor the record, and its records carry no number; here a file cut short
or failing its checksum is one sentence naming the file and the record, and a record that
does not decode is rejected with its file and number (``line`` in the rejected rows: the
record's number in its file, from 1), not dropped.

Example::

    with beam.Pipeline() as p:
        result = p | ReadTFRecordExamples(files, HashSplitter())
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Sequence
from typing import Optional

import apache_beam as beam

from transforms.example_gen.input_format import CHUNK_ROWS, ExampleGenResult
from transforms.example_gen.splitting import HashSplitter, split_batch, split_counters
from transforms.metrics import NAMESPACE
from transforms.rows import RejectedRow

__all__ = ["ReadTFRecordExamples"]


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

    def process(self, element: tuple[str, int, list[bytes]]) -> Iterator:
        path, first, records = element
        self._read.inc(len(records))
        try:
            batch = self._decoder.DecodeBatch(records)
        except Exception:  # noqa: BLE001  find the bad records one by one
            good = []
            for i, r in enumerate(records):
                try:
                    self._decoder.DecodeBatch([r])
                    good.append(r)
                except Exception as e:  # noqa: BLE001
                    self._rejected.inc()
                    yield beam.pvalue.TaggedOutput(
                        "rejected",
                        RejectedRow(
                            path,
                            first + i,
                            f"record {first + i} is not a valid tf.Example ({e})",
                            r[:200].hex(),
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


class _ReadRecordBatches(beam.DoFn):
    """A file's path -> ``(path, number of the first record, records)``, CHUNK_ROWS records
    at a time, in file order; a damaged file raises one sentence naming it and the record."""

    def process(self, path: str) -> Iterator[tuple[str, int, list[bytes]]]:
        from apache_beam.io.tfrecordio import _TFRecordUtil

        from beam_pipeline.core.errors import PipelineError
        from transforms.example_gen.compressed import is_decompression_error, open_binary

        first, records = 1, []
        try:
            with open_binary(path) as f:
                while (record := _TFRecordUtil.read_record(f)) is not None:
                    records.append(record)
                    if len(records) == CHUNK_ROWS:
                        yield path, first, records
                        first, records = first + len(records), []
        except (ValueError, OSError, EOFError, zlib.error) as e:
            number = first + len(records)
            text = str(e)
            if "Fewer than" in text or isinstance(e, EOFError):
                what = "ends in the middle of it (a truncated copy?)"
            elif "Mismatch of" in text:
                what = "fails its checksum (damaged bytes)"
            elif is_decompression_error(e):
                what = f"cannot be decompressed as the file's name says ({e})"
            else:
                raise
            raise PipelineError(
                f"Input file {path} is damaged at record {number}: the record {what}; "
                f"replace the file with an intact copy or leave it out of --data ({number - 1} "
                "records before it read fine)."
            ) from None
        if records:
            yield path, first, records


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
            # One file per worker at a time (a gzip file cannot be split anyway).
            | "Reshuffle" >> beam.Reshuffle()
            | "ReadRecords" >> beam.ParDo(_ReadRecordBatches())
            | "Decode"
            >> beam.ParDo(_DecodeExamples(self._splitter, self._schema_bytes)).with_outputs(
                "rejected", main="batches"
            )
        )
        return ExampleGenResult(decoded.batches, decoded.rejected)
