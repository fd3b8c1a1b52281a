"""Transform: tf.Transform's analyze-and-transform over the split examples, via TFXIO.

The examples are read as Arrow RecordBatches typed by the schema (tfx-bsl's decoder, as
its ``TFExampleRecord`` TFXIO, whose ``TensorAdapterConfig`` describes them to
tf.Transform); the analyzers run over the train split (with tf.Transform's analyzer cache,
so an unchanged dataset and ``preprocessing_fn`` reuse the previous run's analysis);
every split is transformed and written as gzip TFRecords of tf.Example; the transform
graph is written where ``tft.TFTransformOutput`` opens it.

Example::

    with tft_beam.Context(temp_dir=tmp):
        result = p | TransformExamples(
            examples={Split.TRAIN: "run/examples/train/*", Split.EVAL: "run/examples/eval/*"},
            schema=schema, preprocessing_fn=fn, cache_dir="root/cache/transform",
            dataset_fingerprint="3f2a...")
        result.transform_fn | tft_beam.WriteTransformFn("run/transform_graph")
"""

from __future__ import annotations

import collections
import functools
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import tensorflow_transform.beam as tft_beam
from apache_beam.io.filesystems import FileSystems
from tensorflow_metadata.proto.v0 import schema_pb2
from tensorflow_transform import analyzer_nodes
from tensorflow_transform.beam import analyzer_impls, common
from tfx_bsl.public import tfxio

from beam_pipeline.core import fileio
from beam_pipeline.core.types import Split
from transforms.example_encoding import encode_framed
from transforms.metrics import NAMESPACE
from transforms.tfrecords import ReadExampleBatches, WriteTFRecordBatches

__all__ = [
    "BATCH_SIZE",
    "TransformResult",
    "TransformExamples",
    "WriteTransformedExamples",
    "dataset_cache_key",
]

_TELEMETRY = ["beam_pipeline", "Transform"]
# Rows per RecordBatch fed to tf.Transform (TransformExamples' batch_size says why).
BATCH_SIZE = 16384


class TransformResult(NamedTuple):
    """Outputs of :class:`TransformExamples`.

    Attributes:
      transform_fn: the transform graph (write it with ``tft_beam.WriteTransformFn``).
      transformed: per split, RecordBatches of transformed features.
      analyzer_cache: the cache to write with ``WriteAnalysisCacheToFS`` (None if disabled).
    """

    transform_fn: beam.PCollection
    transformed: Mapping[Split, beam.PCollection]
    analyzer_cache: Optional[beam.PCollection]


def dataset_cache_key(dataset_fingerprint: str) -> tft_beam.analyzer_cache.DatasetKey:
    """The analyzer-cache key of the train split with this data fingerprint."""
    return tft_beam.analyzer_cache.DatasetKey(
        f"train-{dataset_fingerprint[:16]}" if dataset_fingerprint else "train"
    )


class TransformExamples(beam.PTransform[beam.pvalue.PBegin, TransformResult]):
    """Analyzes the train split and transforms every split with ``preprocessing_fn``.

    Must be applied inside a ``tft_beam.Context``.

    Args:
      examples: split -> file pattern of gzip TFRecords of tf.Example.
      schema: the raw data schema.
      preprocessing_fn: the user's tf.Transform function.
      cache_dir: tf.Transform analyzer cache folder, or None for no cache.
      dataset_fingerprint: identifies the train data's content; the cache is keyed by it
        (tf.Transform adds the analyzers' own fingerprints, so a changed
        ``preprocessing_fn`` misses the cache by itself).
      batch_size: rows per RecordBatch fed to tf.Transform (its ``desired_batch_size``
        applies only to instance dicts; record batches go in as read). Every batch is one
        TensorFlow call per analysis phase and per transform, with a fixed cost (most of
        it turning Arrow columns into tensors), so larger batches spend less CPU in
        tf.Transform's batch handling, up to a size past which they gain nothing
        (benchmarks/bench_transform.py --profile).
      train_datasets: with a ``{SPAN}`` input, the analyzer-cache dataset key of each span
        -> the file pattern of that span's train examples: the analyzers run per span
        (tf.Transform merges the spans' partial results), so a span whose analysis is
        cached is not read for analysis at all.
    """

    def __init__(
        self,
        examples: Mapping[Split, str],
        schema: schema_pb2.Schema,
        preprocessing_fn: Callable,
        cache_dir: Optional[str] = None,
        dataset_fingerprint: str = "",
        batch_size: int = BATCH_SIZE,
        train_datasets: Optional[Mapping[str, str]] = None,
    ):
        super().__init__()
        self._batch_size = batch_size

        self._files = {split: sorted(fileio.glob(p)) for split, p in examples.items()}
        empty = [p for split, p in examples.items() if not self._files[split]]
        if empty:
            raise ValueError(f"TransformExamples: no examples match {empty[0]}.")
        if Split.TRAIN not in examples:
            raise ValueError("TransformExamples needs a train split to analyze.")
        self._examples = dict(examples)
        self._schema = schema
        self._preprocessing_fn = preprocessing_fn
        self._cache_dir = cache_dir
        self._dataset_key = dataset_cache_key(dataset_fingerprint)
        self._train_datasets = {
            tft_beam.analyzer_cache.DatasetKey(key): sorted(fileio.glob(pattern))
            for key, pattern in (train_datasets or {}).items()
        }
        empty = [k.key for k, files in self._train_datasets.items() if not files]
        if empty:
            raise ValueError(f"TransformExamples: no train examples for dataset {empty[0]}.")

    def _tfxio(self, split: Split) -> tfxio.TFExampleRecord:
        return tfxio.TFExampleRecord(
            file_pattern=self._examples[split],
            telemetry_descriptors=_TELEMETRY,
            schema=self._schema,
        )

    def expand(self, pbegin):
        train_io = self._tfxio(Split.TRAIN)
        adapter_config = train_io.TensorAdapterConfig()
        # The analysis decodes the train split once and spills its batches (Arrow IPC, in
        # tf.Transform's temporary folder); the transform pass reads them from there, not
        # from the examples: decoding is most of a read's CPU, the spill's read is a small
        # part of it. Holding the decoded rows in the runner instead (one read feeding both
        # passes) grew its memory by about 700 MB at 1M taxi rows: the transform waits for
        # the analysis as a side input.
        self.spill_dir = fileio.join(
            tft_beam.Context.create_base_temp_dir(), f"spill-{uuid.uuid4().hex[:8]}"
        )
        if self._train_datasets:
            transform_fn, output_cache, spilled = self._analyze_per_dataset(pbegin, train_io)
        else:
            read = pbegin | "ReadForAnalysis" >> self._read_files(
                self._files[Split.TRAIN], spill=True
            )
            spilled = read.spilled
            if self._cache_dir is not None:
                input_cache = pbegin | "ReadCache" >> (
                    tft_beam.analyzer_cache.ReadAnalysisCacheFromFS(
                        self._cache_dir, [self._dataset_key]
                    )
                )
                transform_fn, output_cache = (
                    {self._dataset_key: read.batches},
                    input_cache,
                    adapter_config,
                ) | "Analyze" >> tft_beam.AnalyzeDatasetWithCache(self._preprocessing_fn)
            else:
                transform_fn = (
                    read.batches,
                    adapter_config,
                ) | "Analyze" >> tft_beam.AnalyzeDataset(self._preprocessing_fn)
                output_cache = None
        # Where tf.Transform itself is the limit (py-spy of the job in_memory, 1M taxi rows,
        # after this package's reader, encoder and sink were cut down; shares of the thread
        # that runs the steps, which the job waits on): its batch to tensor conversion
        # (impl._RunMetaGraphDoFn._make_feed_dict, tfx-bsl's TensorAdapter.ToBatchTensors:
        # one SparseTensor per feature and batch, string columns through numpy object
        # arrays) about a third; tracing and saving the graphs (impl._create_v2_saved_model,
        # twice) about a sixth; its TensorFlow graphs (saved_transform_io_v2.
        # apply_transform_model) about an eighth. tft.vocabulary without weights hands every
        # token to Python (tf_utils.reduce_batch_weighted_counts returns them unreduced),
        # where its own step counted them one Beam element each: this module's step counts
        # them per batch first (_VocabularyAccumulate, at the end of this module). Larger
        # batches do not help (65,536 rows: the same CPU, 1 GB more memory); an analysis
        # reading only its analyzers' columns (tft.get_analyze_input_columns, as TFX
        # projects) costs another trace of the preprocessing_fn and was slower in each of
        # 3 alternated pairs.
        transformed = self._transform(pbegin, adapter_config, transform_fn, spilled)
        return TransformResult(transform_fn, transformed, output_cache)

    def _transform(self, pbegin, adapter_config, transform_fn, spilled) -> dict:
        """Every split through one ``TransformDataset``, each batch tagged with its split.

        tf.Transform loads the transform graph once per ``TransformDataset`` (each has its
        own ``shared.Shared`` handle), and loading it is most of a small run's Transform
        after the analysis: one step for all splits loads it once. The split travels as a
        passthrough column (tf.Transform's own way to carry a key through, TFX's
        Transform does the same), read back to send each batch to its split and dropped
        before the batch is written. One read of every split's files tags the batches: a
        ``Flatten`` of one read per split made the runner hold all their batches until
        the analysis was done (the transform waits for it), about a gigabyte more at 1M
        taxi rows in memory; one read is fused with the transform and streams."""
        splits = list(self._examples)
        column = _split_column(adapter_config, transform_fn)
        files = [(index, f) for index, split in enumerate(splits) for f in self._files[split]]
        tag = functools.partial(_with_split, column=column)
        tagged = pbegin | "Read" >> self._read_files(files, tag, spilled=spilled)
        schema = adapter_config.arrow_schema.append(pa.field(column, _SPLIT_TYPE))
        tagged_config = tfxio.TensorAdapterConfig(schema, adapter_config.tensor_representations)
        with tft_beam.Context(passthrough_keys={column}):
            batches, _ = ((tagged, tagged_config), transform_fn) | "Transform" >> (
                tft_beam.TransformDataset(output_record_batches=True)
            )
        tags = [str(index) for index in range(len(splits))]
        parts = batches | "BySplit" >> beam.FlatMap(_by_split, column).with_output_types(
            pa.RecordBatch, **dict.fromkeys(tags, pa.RecordBatch)
        ).with_outputs(*tags)
        return {split: parts[tag] for split, tag in zip(splits, tags)}

    def _analyze_per_dataset(self, pbegin, train_io):
        """The analysis with one dataset key per span (TFX's Transform does the same with
        its inputs): the spans whose analyzers the cache holds are given as None, which
        tf.Transform reads nothing of."""
        from tensorflow_transform.beam import analysis_graph_builder

        adapter_config = train_io.TensorAdapterConfig()
        keys = list(self._train_datasets)
        if self._cache_dir is None:
            # Every span's files in one read, as _transform reads every split's: a Flatten
            # of one read per span would make the runner hold all their batches.
            files = [f for span_files in self._train_datasets.values() for f in span_files]
            read = pbegin | "ReadForAnalysis" >> self._read_files(files, spill=True)
            transform_fn = (read.batches, adapter_config) | "Analyze" >> (
                tft_beam.AnalyzeDataset(self._preprocessing_fn)
            )
            return transform_fn, None, read.spilled
        input_cache = pbegin | "ReadCache" >> tft_beam.analyzer_cache.ReadAnalysisCacheFromFS(
            self._cache_dir, keys
        )
        needed = analysis_graph_builder.get_analysis_dataset_keys(
            self._preprocessing_fn,
            train_io.TensorAdapter().OriginalTypeSpecs(),
            keys,
            input_cache,
            tft_beam.Context.get_use_tf_compat_v1(),
        )
        if not needed:
            # Every span's analyzers are cached (a preprocessing_fn changed outside its
            # analyzers): tf.Transform still needs one dataset to build the analysis
            # from, so the newest span is read (its analyzers' outputs still come from the
            # cache).
            needed = {keys[-1]}
        reads = {
            key: pbegin | f"ReadForAnalysis[{key.key}]" >> self._read_files(files, spill=True)
            for key, files in self._train_datasets.items()
            if key in needed
        }
        data = {key: reads[key].batches if key in reads else None for key in keys}
        transform_fn, output_cache = (
            data,
            input_cache,
            adapter_config,
        ) | "Analyze" >> tft_beam.AnalyzeDatasetWithCache(self._preprocessing_fn)
        spilled = [read.spilled for read in reads.values()] | "Spilled" >> beam.Flatten()
        return transform_fn, output_cache, spilled

    def _read_files(self, files, tag=None, spill=False, spilled=None) -> ReadExampleBatches:
        spill_dir = self.spill_dir if spill else None
        return ReadExampleBatches(files, self._schema, self._batch_size, tag, spill_dir, spilled)


# The passthrough column that carries each batch's split through the transform (a
# list<int64> of one value per row, as tf.Transform requires of passthrough columns),
# named so that it is neither an input column nor an output of the preprocessing_fn
# (tf.Transform refuses the first and its record batch encoder fails on the second).
_SPLIT_COLUMN = "__beam_pipeline_split__"
_SPLIT_TYPE = pa.list_(pa.int64())


def _split_column(adapter_config, transform_fn) -> str:
    taken = set(adapter_config.arrow_schema.names)
    # The outputs' names, known when the analysis was wired (tf.Transform traced the
    # preprocessing_fn then).
    schema = transform_fn[1].dataset_metadata.schema
    taken.update(f.name for f in schema.feature)
    taken.update(f.name for f in schema.sparse_feature)
    name = _SPLIT_COLUMN
    while name in taken:
        name += "_"
    return name


def _with_split(batch: pa.RecordBatch, index: int, column: str) -> pa.RecordBatch:
    rows = batch.num_rows
    values = pa.ListArray.from_arrays(  # from numpy: no Python int per row
        pa.array(np.arange(rows + 1, dtype=np.int32)), pa.array(np.full(rows, index, np.int64))
    )
    return batch.append_column(pa.field(column, _SPLIT_TYPE), values)


def _by_split(batch_and_passthrough, column: str):
    """A transformed batch, without its split column, to its split's output. The split is
    the passthrough column, or (where the preprocessing_fn changed the batch's row count)
    the one value tf.Transform keeps aside. Typed outputs: Beam sizes the elements of
    untyped ones for its metrics by pickling them (see tfrecords.RecordBatchCoder)."""
    batch, unary = batch_and_passthrough
    index = batch.schema.get_field_index(column)
    values = unary[column] if column in unary else batch.column(index)
    split = values.flatten()[0].as_py() if len(values) else 0
    yield beam.pvalue.TaggedOutput(str(split), batch if index < 0 else batch.remove_column(index))


class _CountRows(beam.DoFn):
    def __init__(self, split: Split):
        self._rows = beam.metrics.Metrics.counter(NAMESPACE, f"transform.rows_out.{split.value}")

    def process(self, batch: pa.RecordBatch):
        self._rows.inc(batch.num_rows)
        yield batch


class WriteTransformedExamples(
    beam.PTransform[beam.PCollection[pa.RecordBatch], beam.pvalue.PDone]
):
    """Writes transformed RecordBatches as gzip TFRecords ``<out_dir>/<split>/data-*``."""

    def __init__(self, out_dir: str, split: Split):
        super().__init__()
        self._out_dir = out_dir
        self._split = split

    def expand(self, batches):
        _ = (
            batches
            | "Count" >> beam.ParDo(_CountRows(self._split)).with_output_types(pa.RecordBatch)
            | "EncodeAndWrite"
            >> WriteTFRecordBatches(
                FileSystems.join(self._out_dir, self._split.value), encode=encode_framed
            )
        )
        return beam.pvalue.PDone(batches.pipeline)


# tf.Transform's own step for an unweighted tft.vocabulary (analyzer_impls.
# _VocabularyAccumulateImpl) hands every token of every batch to Beam as an element of its
# own and counts them with beam.combiners.Count.PerElement: at 1M taxi rows, 1.1M elements
# for the taxi module's two vocabularies, each through a FlatMap's output, a Map to
# (token, None) and the combiner's add_input. Counting each batch's tokens first
# (collections.Counter, in C) hands Beam one (token, count) pair per distinct token of a
# batch, which CombinePerKey(sum) adds up: the same (token, count) pairs as Count.PerElement
# makes, so the vocabulary, its frequencies and the analyzer cache's accumulators are the
# same (tests/test_transform_vocabulary.py compares them with tf.Transform's own step).
# Every other ordering (weights, labels, mutual information) is tf.Transform's step as it is.
# Registered when this module is imported: the step is chosen as tf.Transform builds the
# analysis, in the process that builds the job.


def _token_counts(batch_values) -> Iterable[tuple]:
    """A batch of tokens (tf.Transform's analyzer input) as (token, count) pairs."""
    (batch_value,) = batch_values
    return collections.Counter(batch_value.tolist()).items()


@common.register_ptransform(analyzer_nodes.VocabularyAccumulate)
class _VocabularyAccumulate(analyzer_impls._VocabularyAccumulateImpl):
    """tf.Transform's vocabulary accumulation, an unweighted one counted per batch first."""

    def expand(self, inputs):
        if self._vocab_ordering_type != analyzer_impls._VocabOrderingType.FREQUENCY:
            return super().expand(inputs)
        (pcoll,) = inputs
        return (
            pcoll
            | "CountTokensPerBatch" >> beam.FlatMap(_token_counts)
            | "CountPerToken"
            >> beam.CombinePerKey(sum).with_input_types(Any).with_output_types(Any)
        )
