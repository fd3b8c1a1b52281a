"""The rows a reading step emits: typed rows of one split, and the rows it refused.

ExampleGen's input formats read into :class:`SplitBatch` and :class:`RejectedRow`; the
BulkInferrer refuses its unreadable rows as :class:`RejectedRow` too.

Example::

    SplitBatch(Split.TRAIN, record_batch)
    RejectedRow("data.csv", 12, "3 fields, the header has 4", "a,b,c").to_json()
"""

from __future__ import annotations

import json
from typing import NamedTuple

import apache_beam as beam
import pyarrow as pa

from beam_pipeline.core.types import Split

__all__ = ["RejectedRow", "SplitBatch", "batches_of"]


class RejectedRow(NamedTuple):
    """A row that could not become an example, with where it came from and why."""

    file: str
    line: int
    reason: str
    text: str

    def to_json(self) -> str:
        return json.dumps(self._asdict(), ensure_ascii=False)


class SplitBatch(NamedTuple):
    """Rows of one split as a typed Arrow RecordBatch."""

    split: Split
    batch: pa.RecordBatch


def batches_of(split: Split) -> beam.PTransform:
    """SplitBatches -> the RecordBatches of ``split``, typed: Beam sizes the elements of an
    untyped PCollection for its metrics by pickling them (tfrecords.RecordBatchCoder)."""
    return beam.FlatMap(_batch_of, split).with_output_types(pa.RecordBatch)


def _batch_of(split_batch: SplitBatch, split: Split) -> list[pa.RecordBatch]:
    return [split_batch.batch] if split_batch.split is split else []
