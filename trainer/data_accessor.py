"""``DataAccessor``: the datasets a module file trains on, read with tfx-bsl TFXIO as TFX does.

TFX module files call ``fn_args.data_accessor.tf_dataset_factory(file_pattern, options,
schema)``; this one has the same signature and behaviour: gzip TFRecords of tf.Examples are
read with ``tfx_bsl.public.tfxio.TFExampleRecord``, which lists the files, reads them
interleaved in parallel (``reader_num_threads``, autotuned), shuffles, repeats, batches,
parses a whole batch in one op and prefetches (autotuned).

Example::

    from tfx_bsl.public import tfxio

    dataset = fn_args.data_accessor.tf_dataset_factory(
        fn_args.train_files,
        tfxio.TensorFlowDatasetOptions(batch_size=64, label_key="species_xf"),
        tf_transform_output.transformed_metadata.schema,
    )  # batches of (features dict, label)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Optional, Union

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError

if TYPE_CHECKING:
    import pyarrow as pa
    import tensorflow as tf
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx_bsl.public import tfxio

__all__ = ["DataAccessor", "FilePattern"]

FilePattern = Union[str, Sequence[str]]


def _patterns(file_pattern: FilePattern) -> list[str]:
    patterns = [file_pattern] if isinstance(file_pattern, str) else list(file_pattern)
    if not patterns:
        raise PipelineError(
            "The trainer was given an empty list of file patterns; pass fn_args.train_files "
            "or fn_args.eval_files to the data accessor."
        )

    for pattern in patterns:
        if not fileio.glob(pattern):
            raise PipelineError(
                f"Trainer input pattern {pattern!r} matches no file; check that the Transform "
                "stage wrote transformed_examples for this split in the run directory."
            )
    return patterns


@dataclasses.dataclass(frozen=True)
class DataAccessor:
    """Makes ``tf.data`` datasets and Arrow RecordBatches from tf.Example TFRecord files.

    Attributes:
      telemetry_descriptors: names under which tfx-bsl reports its I/O metrics.
      data_view_decode_fn: always None (TFX's DataView is not supported); kept so module
        files that test it keep working.
      workers: the workers of a multi-worker training (``--train_workers``); above 1, every
        dataset carries the auto-shard policy that gives each worker a share
        (:func:`trainer.loop.shard_per_worker`), so that a ``run_fn`` written for one
        worker trains on N unchanged (tf.data's default would shard the bundled example's
        one file per split by file, and leave the other workers no data).
    """

    telemetry_descriptors: tuple[str, ...] = ("beam_pipeline", "Trainer")
    data_view_decode_fn: None = None
    workers: int = 1

    def _tfxio(self, file_pattern: FilePattern, schema: Optional[schema_pb2.Schema]):
        from tfx_bsl.public import tfxio

        return tfxio.TFExampleRecord(
            file_pattern=_patterns(file_pattern),
            schema=schema,
            telemetry_descriptors=list(self.telemetry_descriptors),
        )

    def tf_dataset_factory(
        self,
        file_pattern: FilePattern,
        options: tfxio.TensorFlowDatasetOptions,
        schema: Optional[schema_pb2.Schema] = None,
    ) -> tf.data.Dataset:
        """A batched dataset of feature dicts, or of (features, label) with ``label_key``.

        Args:
          file_pattern: a glob or a list of globs of gzip (or plain) TFRecord files.
          options: batch size, epochs (None: repeat forever), shuffling, ``label_key``...
          schema: the schema of the examples, usually
            ``tf_transform_output.transformed_metadata.schema``.

        Returns:
          a ``tf.data.Dataset`` that reads files in parallel and prefetches.

        Raises:
          PipelineError: a pattern matches no file, or no schema is given.
        """
        if schema is None:
            raise PipelineError(
                "data_accessor.tf_dataset_factory was called without a schema; pass "
                "tf_transform_output.transformed_metadata.schema as its third argument."
            )
        dataset = self._tfxio(file_pattern, schema).TensorFlowDataset(options)
        if self.workers > 1:
            from trainer.loop import shard_per_worker

            dataset = shard_per_worker(dataset, _patterns(file_pattern), self.workers)
        return dataset

    def record_batch_factory(
        self,
        file_pattern: FilePattern,
        options: tfxio.RecordBatchesOptions,
        schema: Optional[schema_pb2.Schema] = None,
    ) -> Iterator[pa.RecordBatch]:
        """Arrow RecordBatches of the examples (all features when ``schema`` is None).

        Raises:
          PipelineError: a pattern matches no file.
        """
        return self._tfxio(file_pattern, schema).RecordBatches(options)
