"""Beam PTransforms of the pipeline's data-parallel stages (no orchestration here).

One module per concept: ``example_gen`` (read, type, split, write examples),
``statistics``, ``schema``, ``validation``, ``transform`` (tf.Transform), ``tfrecords``
(the batched TFRecord sink and reader), ``tuning`` (trial fan-out) and ``training`` (the
training step).

Example::

    from transforms import GenerateStatistics, ReadCsvExamples
"""

from transforms.example_gen import (
    CsvFormat,
    HashSplitter,
    ReadCsvExamples,
    ReadTFRecordExamples,
    RejectedRow,
    SplitBatch,
    WriteRejectedRows,
    WriteSplitExamples,
)
from transforms.schema import InferSchema, infer_schema, read_schema, write_schema
from transforms.statistics import GenerateStatistics, read_statistics, write_statistics
from transforms.tfrecords import WriteTFRecordBatches
from transforms.training import TrainModel
from transforms.transform import TransformExamples, TransformResult, WriteTransformedExamples
from transforms.tuning import RunTrials
from transforms.validation import (
    ValidateStatistics,
    blocking_anomalies,
    format_anomalies,
    is_blocking,
    validate_statistics,
)

__all__ = [
    "CsvFormat",
    "GenerateStatistics",
    "HashSplitter",
    "InferSchema",
    "ReadCsvExamples",
    "ReadTFRecordExamples",
    "RejectedRow",
    "RunTrials",
    "SplitBatch",
    "TrainModel",
    "TransformExamples",
    "TransformResult",
    "ValidateStatistics",
    "WriteRejectedRows",
    "WriteSplitExamples",
    "WriteTFRecordBatches",
    "WriteTransformedExamples",
    "blocking_anomalies",
    "format_anomalies",
    "infer_schema",
    "is_blocking",
    "read_schema",
    "read_statistics",
    "validate_statistics",
    "write_schema",
    "write_statistics",
]
