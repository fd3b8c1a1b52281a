"""Beam PTransforms of the pipeline's data-parallel stages (no orchestration here).

One module per concept: ``example_gen`` (read, type, split, write examples; a package
with the input format as a plug-in point), ``statistics``, ``transform`` (tf.Transform),
``tfrecords`` (the batched TFRecord sink and reader), ``tuning`` (trial fan-out) and
``training`` (the training step). Schema inference and validation run on the launcher
(protos in, a proto out): they are ``beam_pipeline.schema_gen`` and
``beam_pipeline.validation``.

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
from transforms.statistics import GenerateStatistics, read_statistics, write_statistics
from transforms.tfrecords import WriteTFRecordBatches
from transforms.training import TrainModel
from transforms.transform import TransformExamples, TransformResult, WriteTransformedExamples
from transforms.tuning import RunTrials

__all__ = [
    "CsvFormat",
    "GenerateStatistics",
    "HashSplitter",
    "ReadCsvExamples",
    "ReadTFRecordExamples",
    "RejectedRow",
    "RunTrials",
    "SplitBatch",
    "TrainModel",
    "TransformExamples",
    "TransformResult",
    "WriteRejectedRows",
    "WriteSplitExamples",
    "WriteTFRecordBatches",
    "WriteTransformedExamples",
    "read_statistics",
    "write_statistics",
]
