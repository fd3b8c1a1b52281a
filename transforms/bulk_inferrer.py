"""The BulkInferrer's Beam side: raw examples scored by a SavedModel with Beam's RunInference.

Raw rows are read by ExampleGen's readers (the same typing, the same rejected rows),
encoded as tf.Examples, batched and scored by Beam's ``RunInference``
(``apache_beam.ml.inference.base``: ``BatchElements`` under a size cap, one model per
worker process shared by its threads, inference metrics, ``with_exception_handling``) with
:class:`SavedModelHandler`, and written as PredictionLog TFRecords (TFX's
``InferenceResult``), optionally with the examples the predictions joined as features
(TFX's ``output_example_spec``). Rows read = rows scored + rows rejected: a row the reader
refuses or the model refuses goes to the rejected rows, never dropped.

Why a handler of our own: neither ready one runs this pipeline's models. tfx-bsl 1.21's
``RunInference`` loads the SavedModel through TF1's session loader, which cannot restore a
Keras 3 export ("Could not find variable dense_4/bias"; the same with a plain
``tf.compat.v1.saved_model.loader.load``), and Beam's TensorFlow handlers
(``tensorflow_inference``) import tensorflow_hub (so tf_keras) and load through Keras 3,
which refuses SavedModel folders. :class:`SavedModelHandler` loads with
``tf.saved_model.load`` and calls the ``serving_default`` signature on serialized
tf.Examples, as TF Serving would; its PredictionLogs follow tfx-bsl's conventions.

Example::

    result = p | ScoreExamples(read, SavedModelHandler(model_dir, max_batch_size=1024))
    result.logs | WritePredictionLogs(out_dir)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam.ml.inference.base import ModelHandler, PredictionResult, RunInference

from beam_pipeline.core import fileio
from transforms.metrics import NAMESPACE
from transforms.rows import RejectedRow

__all__ = [
    "PREDICTION_LOGS",
    "PREDICTION_PREFIX",
    "ROWS_SCORED",
    "ROWS_REFUSED",
    "SavedModelHandler",
    "ScoreExamples",
    "ScoreResult",
    "WritePredictionLogs",
    "WriteInferredExamples",
    "required_features",
]

# TFX's BulkInferrer names its output files so; tfx-bsl's readers glob for them.
PREDICTION_LOGS = "prediction_logs"
# A prediction output joined to its example is the feature prediction_<output name>.
PREDICTION_PREFIX = "prediction_"
ROWS_SCORED = "bulk_inferrer.rows_scored"
ROWS_REFUSED = "bulk_inferrer.rows_refused"
_SIGNATURE = "serving_default"


@dataclasses.dataclass(frozen=True)
class _Refused:
    """A row the model could not score, and why (routed to the rejected rows)."""

    reason: str


@dataclasses.dataclass
class _Loaded:
    """A loaded SavedModel with its serving signature and that signature's one input."""

    model: Any  # kept: the signature's variables live as long as the loaded object
    signature: Any
    input_alias: str


class SavedModelHandler(ModelHandler[bytes, Any, _Loaded]):
    """Serialized tf.Example -> PredictionLog, with ``tf.saved_model.load`` and the model's
    ``serving_default`` signature (see the module docstring for why not a ready handler).

    A batch the model refuses (one malformed example fails the whole call) is scored again
    row by row, so only the bad rows are refused: Beam's dead-letter output would refuse the
    whole batch.

    Args:
      model_dir: the SavedModel folder.
      max_batch_size: the most examples one call scores (``BatchElements``' cap).
    """

    def __init__(self, model_dir: str, max_batch_size: int = 1024):
        super().__init__(min_batch_size=1, max_batch_size=max_batch_size)
        self._model_dir = model_dir

    def load_model(self) -> _Loaded:
        import tensorflow as tf

        model = tf.saved_model.load(self._model_dir)
        signature = model.signatures[_SIGNATURE]
        inputs = signature.structured_input_signature[1]
        if len(inputs) != 1 or next(iter(inputs.values())).dtype != tf.string:
            raise ValueError(
                f"The {_SIGNATURE} signature of {self._model_dir} takes {sorted(inputs)}, not one "
                "string tensor of serialized tf.Examples; export a serving signature that parses "
                "tf.Examples (the Trainer's default export does)."
            )
        return _Loaded(model, signature, next(iter(inputs)))

    def run_inference(
        self,
        batch: Sequence[bytes],
        model: _Loaded,
        inference_args: Optional[dict[str, Any]] = None,
    ) -> Iterable[PredictionResult]:
        try:
            logs = _predict(model, batch)
        except Exception as e:  # noqa: BLE001 - which row is bad is found row by row below
            if len(batch) == 1:
                return [PredictionResult(batch[0], _Refused(_why(e)))]
            return [r for example in batch for r in self.run_inference([example], model)]
        return [PredictionResult(e, log) for e, log in zip(batch, logs)]

    def get_num_bytes(self, batch: Sequence[bytes]) -> int:
        return sum(len(e) for e in batch)

    def get_metrics_namespace(self) -> str:
        return "BulkInferrer"


# TensorFlow's words for a feature the serving signature's tf.Example parsing requires and
# the example lacks (ParseExampleV2's message, the same since TF 1.x).
_MISSING_FEATURE = re.compile(
    r"Feature: (\S+) \(data type: (\w+)\) is required but could not be found"
)
# The lines of a TensorFlow error that say where, not what (graph execution, op traces).
_TF_NOISE = re.compile(
    r"^(Graph execution error:|Detected at node|<stack traces unavailable>|\[\[)"
)


def _tf_message(error: Exception) -> str:
    """The line of a TensorFlow error that says what went wrong (a graph error's first
    line is "Graph execution error:", the message is further down)."""
    lines = [line.strip() for line in str(error).splitlines()]
    found = [line for line in lines if line and not _TF_NOISE.match(line)]
    return found[0] if found else type(error).__name__


def _why(error: Exception) -> str:
    """Why the model refused one example, in one line (the missing feature by name)."""
    missing = _MISSING_FEATURE.search(str(error))
    if missing:
        return (
            f"the model refused it: feature {missing.group(1)} ({missing.group(2)}) is "
            "missing, and the model's serving signature requires it"
        )
    return f"the model refused it: {_tf_message(error)[:300]}"


def required_features(model_dir: str) -> list[str]:
    """The features the model's ``serving_default`` signature requires in every example,
    found by asking it: an example with none is scored, the feature TensorFlow says is
    missing added (a value of its type), until it scores or fails otherwise.

    Reading the parse spec from the graph instead would need TensorFlow's private function
    library (the parsing sits in nested functions); asking is public API and also proves
    that the model loads and scores, on the launcher, before any job starts.

    Raises:
      Exception: the SavedModel does not load, or its signature is not one string input
        (:meth:`SavedModelHandler.load_model`).
    """
    import tensorflow as tf

    loaded = SavedModelHandler(model_dir).load_model()
    example = tf.train.Example()
    needed: list[str] = []
    while True:
        try:
            _predict(loaded, [example.SerializeToString()])
            return needed
        except Exception as e:  # noqa: BLE001 - TensorFlow's parsing error names the feature
            missing = _MISSING_FEATURE.search(str(e))
            if missing is None or missing.group(1) in needed:
                return needed
        name, dtype = missing.groups()
        needed.append(name)
        feature = example.features.feature[name]
        if dtype == "float":
            feature.float_list.value.append(0.0)
        elif dtype == "int64":
            feature.int64_list.value.append(0)
        else:
            feature.bytes_list.value.append(b"")


def _predict(model: _Loaded, batch: Sequence[bytes]) -> list:
    """PredictionLogs of one batch, as tfx-bsl's ``_post_process`` for a predict signature
    writes them: the request holds the serialized example under the signature's input alias
    (shape [1]), the response each output's row (shape [1, ...])."""
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    outputs = model.signature(**{model.input_alias: tf.constant(list(batch))})
    outputs = {k: v.numpy() for k, v in outputs.items()}
    for name, value in outputs.items():
        if value.ndim < 1 or value.shape[0] != len(batch):
            raise ValueError(f"output {name} has shape {value.shape}, not one row per example")
    logs = []
    for i, example in enumerate(batch):
        log = prediction_log_pb2.PredictionLog()
        predict = log.predict_log
        request = predict.request.inputs[model.input_alias]
        request.dtype = tf.string.as_datatype_enum
        request.tensor_shape.dim.add().size = 1
        request.string_val.append(example)
        predict.request.model_spec.signature_name = _SIGNATURE
        predict.response.model_spec.signature_name = _SIGNATURE
        for name, value in outputs.items():
            row = value[i]
            predict.response.outputs[name].CopyFrom(
                tf.make_tensor_proto(row, shape=np.expand_dims(row, 0).shape)
            )
        logs.append(log)
    return logs


class _EncodeRows(beam.DoFn):
    """RecordBatch -> serialized tf.Examples, one element each (tfx-bsl's C++ encoder)."""

    def process(self, batch: pa.RecordBatch) -> Iterator[bytes]:
        from tfx_bsl.coders import example_coder

        yield from example_coder.RecordBatchToExamplesEncoder().encode(batch)


class _Route(beam.DoFn):
    """Scored rows to the main output (counted), refused ones to ``refused``."""

    def setup(self):
        self._scored = beam.metrics.Metrics.counter(NAMESPACE, ROWS_SCORED)
        self._refused = beam.metrics.Metrics.counter(NAMESPACE, ROWS_REFUSED)

    def process(self, result: PredictionResult):
        if isinstance(result.inference, _Refused):
            self._refused.inc()
            yield beam.pvalue.TaggedOutput("refused", _rejected(result.example, result.inference))
        else:
            self._scored.inc()
            yield result.inference


class _RouteFailedBatch(beam.DoFn):
    """A batch RunInference's dead-letter output caught (the model did not load, a batch
    failed outside the row-by-row retry): each row of it is rejected, counted."""

    def setup(self):
        self._refused = beam.metrics.Metrics.counter(NAMESPACE, ROWS_REFUSED)

    def process(self, failed):
        batch, error = failed
        reason = f"the model could not score its batch: {_tf_message(error)[:300]}"
        for example in batch if isinstance(batch, (list, tuple)) else [batch]:
            self._refused.inc()
            yield _rejected(example, _Refused(reason))


def _rejected(example: bytes, refused: _Refused) -> RejectedRow:
    """A refused row as a rejected row: it was read fine, so no file line; its text is the
    tf.Example's text form."""
    import tensorflow as tf

    text = str(tf.train.Example.FromString(example)).replace("\n", " ")[:2000]
    return RejectedRow("", 0, refused.reason, text)


class ScoreResult(NamedTuple):
    """What :class:`ScoreExamples` returns."""

    logs: beam.PCollection  # [PredictionLog]
    rejected: beam.PCollection  # [RejectedRow]: the reader's and the model's


class ScoreExamples(beam.PTransform):
    """An ExampleGen read result (typed RecordBatches + rejected rows) -> PredictionLogs and
    every rejected row.

    Args:
      handler: the model handler (:class:`SavedModelHandler`).
    """

    def __init__(self, handler: ModelHandler):
        super().__init__()
        self._handler = handler

    def expand(self, read) -> ScoreResult:
        examples = (
            read.batches
            | "Batches" >> beam.Map(lambda sb: sb.batch).with_output_types(pa.RecordBatch)
            | "EncodeExamples" >> beam.ParDo(_EncodeRows())
        )
        main, failed = (
            examples | "RunInference" >> RunInference(self._handler).with_exception_handling()
        )
        routed = main | "Route" >> beam.ParDo(_Route()).with_outputs("refused", main="logs")
        failed_rows = failed.failed_inferences | "FailedBatches" >> beam.ParDo(_RouteFailedBatch())
        rejected = (read.rejected, routed.refused, failed_rows) | "AllRejected" >> beam.Flatten()
        return ScoreResult(routed.logs, rejected)


class WritePredictionLogs(beam.PTransform):
    """PredictionLogs -> ``<out_dir>/prediction_logs-*.gz`` (gzip TFRecords, as TFX writes)."""

    def __init__(self, out_dir: str):
        super().__init__()
        self._out_dir = out_dir

    def expand(self, logs):
        from tensorflow_serving.apis import prediction_log_pb2

        return logs | "Write" >> beam.io.WriteToTFRecord(
            fileio.join(self._out_dir, PREDICTION_LOGS),
            coder=beam.coders.ProtoCoder(prediction_log_pb2.PredictionLog),
            file_name_suffix=".gz",
        )


def _joined(log) -> bytes:
    """The log's example with each prediction output as a feature ``prediction_<name>``."""
    import numpy as np
    import tensorflow as tf

    predict = log.predict_log
    (request,) = predict.request.inputs.values()
    example = tf.train.Example.FromString(request.string_val[0])
    for name, proto in sorted(predict.response.outputs.items()):
        values = tf.make_ndarray(proto).reshape(-1)
        feature = example.features.feature[PREDICTION_PREFIX + name]
        feature.Clear()
        if np.issubdtype(values.dtype, np.floating):
            feature.float_list.value.extend(values.tolist())
        elif np.issubdtype(values.dtype, np.integer) or values.dtype == np.bool_:
            feature.int64_list.value.extend(int(v) for v in values)
        else:
            feature.bytes_list.value.extend(bytes(v) for v in values)
    return example.SerializeToString()


class WriteInferredExamples(beam.PTransform):
    """PredictionLogs -> the examples with the predictions joined as features,
    ``<out_dir>/examples-*.tfrecord.gz`` (TFX's ``output_example_spec``)."""

    def __init__(self, out_dir: str):
        super().__init__()
        self._out_dir = out_dir

    def expand(self, logs):
        return (
            logs
            | "Join" >> beam.Map(_joined)
            | "Write"
            >> beam.io.WriteToTFRecord(
                fileio.join(self._out_dir, "examples"), file_name_suffix=".tfrecord.gz"
            )
        )
