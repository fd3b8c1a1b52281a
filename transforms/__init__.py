"""Beam PTransforms of the pipeline's data-parallel stages (no orchestration here).

One module per concept: ``example_gen`` (read, type, split, write examples; a package
with the input format as a plug-in point), ``statistics``, ``transform`` (tf.Transform),
``tfrecords`` (the batched TFRecord sink and reader), ``tuning`` (trial fan-out) and
``training`` (the training step). Schema inference and validation run on the launcher
(protos in, a proto out): they are ``beam_pipeline.stages.schema.inference`` and
``beam_pipeline.stages.validation.checks``.

Example::

    from transforms import GenerateStatistics, ReadCsvExamples
"""

import importlib

# Names are imported on first use (PEP 562), not with the package: a Beam worker that
# unpickles an ExampleGen or Statistics DoFn imports ``transforms`` first, and an eager
# import of ``transforms.transform`` (tf.Transform) would cost each data worker seconds
# of CPU and hundreds of MB for TensorFlow, which the data stages never call.
_WHERE = {
    "CsvFormat": "transforms.example_gen",
    "HashSplitter": "transforms.example_gen",
    "ReadCsvExamples": "transforms.example_gen",
    "ReadTFRecordExamples": "transforms.example_gen",
    "RejectedRow": "transforms.example_gen",
    "SplitBatch": "transforms.example_gen",
    "WriteRejectedRows": "transforms.example_gen",
    "WriteSplitExamples": "transforms.example_gen",
    "GenerateStatistics": "transforms.statistics",
    "write_statistics": "transforms.statistics_files",
    "WriteTFRecordBatches": "transforms.tfrecords",
    "TrainModel": "transforms.trainer",
    "TransformExamples": "transforms.transform",
    "TransformResult": "transforms.transform",
    "WriteTransformedExamples": "transforms.transform",
    "RunTrials": "transforms.tuner",
}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'transforms' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


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
    "write_statistics",
]
