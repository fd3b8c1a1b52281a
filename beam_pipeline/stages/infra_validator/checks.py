"""The InfraValidator stage: the exported model loaded and queried as a model server would.

One concept: a serving check in a sandbox process. TFX's InfraValidator starts TF Serving
on the model; TF Serving's binary cannot be installed here, so the sandbox is a process of
its own forked from the warm fork server, which has never loaded a module file
(:mod:`beam_pipeline.stages.infra_validator.sandbox` says why it is as clean as a fresh
interpreter): what the model needs must be in the SavedModel, as for a server. The
requests are TF Serving's own format: ``PredictionLog`` records holding ``PredictRequest``
protos for ``serving_default``, built from raw eval examples in batches of 1, 8 and 32.
The process checks that the model loads within the time limit and that every request is
answered with finite outputs of the signature's declared shapes, and times each batch size
(p50/p99 over the repeats). The same records are TF Serving's warm-up file: on success
they are written into the validated model as ``assets.extra/tf_serving_warmup_requests``
(the file TF Serving replays at load).
With an endpoint (``--serving_endpoint``) the same requests and checks go to a running TF
Serving server instead (:mod:`beam_pipeline.stages.infra_validator.endpoint`).

Example::

    result = validate_model("run/model", raw_examples, load_timeout=60)
    result.blessed, result.latency_ms   # {1: {"p50": 0.9, "p99": 1.4}, 8: ...}
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Optional

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import InfraResult

__all__ = [
    "BATCH_SIZES",
    "DEFAULT_MODEL_NAME",
    "WARMUP_FILE",
    "describe",
    "InfraResult",
    "predict_requests",
    "validate_model",
]

BATCH_SIZES = (1, 8, 32)
# Where TF Serving looks for warm-up requests inside a model version folder.
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
_REPEATS = 20
# The model name TF Serving's Docker image serves by default (its MODEL_NAME).
DEFAULT_MODEL_NAME = "model"
_SERVING_SIGNATURE = "serving_default"


def _signature_input(model_dir: str) -> tuple[Optional[str], Optional[str]]:
    """(the input name of serving_default, a problem) from saved_model.pb, without loading."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    path = fileio.join(model_dir, "saved_model.pb")
    if not fileio.exists(path):
        return None, f"the model does not load: there is no saved_model.pb in {model_dir}"
    try:
        saved = saved_model_pb2.SavedModel.FromString(fileio.read_file(path, binary=True))
    except DecodeError as e:
        return None, f"the model does not load: {path} does not parse (DecodeError: {e})"
    signatures = saved.meta_graphs[0].signature_def if saved.meta_graphs else {}
    if _SERVING_SIGNATURE not in signatures:
        return (
            None,
            f"the model has no {_SERVING_SIGNATURE} signature (it has {sorted(signatures)})",
        )
    inputs = signatures[_SERVING_SIGNATURE].inputs
    if len(inputs) != 1 or next(iter(inputs.values())).dtype != types_pb2.DT_STRING:
        return None, (
            f"its {_SERVING_SIGNATURE} signature does not take serialized tf.Examples (one "
            f"string input); it takes {sorted(inputs)}"
        )
    return next(iter(inputs)), None


def predict_requests(input_name: str, examples: Sequence[bytes], model_name: str = "") -> list:
    """TF Serving ``PredictRequest`` protos for ``serving_default``, one per batch size."""
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2

    requests = []
    for size in BATCH_SIZES:
        batch = [examples[i % len(examples)] for i in range(size)]
        request = predict_pb2.PredictRequest(
            model_spec=model_pb2.ModelSpec(name=model_name, signature_name=_SERVING_SIGNATURE)
        )
        request.inputs[input_name].CopyFrom(tf.make_tensor_proto(batch, dtype=tf.string))
        requests.append(request)
    return requests


def _declared_outputs(model_dir: str) -> dict[str, list[Optional[int]]]:
    """serving_default's outputs and their declared shapes (None: any size), from
    saved_model.pb (which :func:`_signature_input` has read and checked)."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = fileio.join(model_dir, "saved_model.pb")
    saved = saved_model_pb2.SavedModel.FromString(fileio.read_file(path, binary=True))
    outputs = saved.meta_graphs[0].signature_def[_SERVING_SIGNATURE].outputs
    return {
        name: [d.size if d.size >= 0 else None for d in info.tensor_shape.dim]
        for name, info in outputs.items()
    }


def _write_requests(path: str, input_name: str, examples: Sequence[bytes]) -> None:
    """TF Serving warm-up records: one PredictionLog per batch size."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    with tf.io.TFRecordWriter(path) as writer:
        for request in predict_requests(input_name, examples):
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())


def validate_model(
    model_dir: str,
    examples: Sequence[bytes],
    *,
    load_timeout: float = 60.0,
    repeats: int = _REPEATS,
    endpoint: str = "",
    model_name: str = DEFAULT_MODEL_NAME,
) -> InfraResult:
    """Loads ``model_dir`` in a sandbox process (or asks the TF Serving server at
    ``endpoint``, which serves it) and sends it TF Serving requests.

    On success the requests are written into the model as its TF Serving warm-up file
    (atomically: a temporary file renamed into place).

    Args:
      model_dir: the SavedModel folder (local or any tf.io.gfile path).
      examples: serialized raw tf.Examples to build the requests from (at least one).
      load_timeout: seconds the load may take (the sandbox's; a server has loaded it).
      repeats: times each request is sent (for the latency percentiles).
      endpoint: ``HOST:PORT`` of a TF Serving gRPC server serving the model as
        ``model_name``; "" for the sandbox (:mod:`beam_pipeline.stages.infra_validator.endpoint`).

    Raises:
      PipelineError: ``endpoint`` cannot be reached.
    """
    input_name, problem = _signature_input(model_dir)
    if problem:
        return InfraResult(False, (problem,), None, {})
    if not examples:
        return InfraResult(False, ("the eval split has no examples to send",), None, {})
    if endpoint:
        from beam_pipeline.stages.infra_validator.endpoint import query_endpoint

        requests = predict_requests(input_name, examples, model_name)
        result = query_endpoint(endpoint, requests, _declared_outputs(model_dir), repeats)
        if result.blessed:
            with tempfile.TemporaryDirectory(prefix="infra-") as tmp:
                path = os.path.join(tmp, "tf_serving_warmup_requests")
                _write_requests(path, input_name, examples)
                _install_warmup(path, model_dir)
        return result
    from beam_pipeline.stages.infra_validator.sandbox import serve
    from trainer.isolation import UserCodeExit, UserCodeTimeout, run_isolated

    limit = load_timeout + 120  # TensorFlow's first calls and the requests on top of the load
    with tempfile.TemporaryDirectory(prefix="infra-") as tmp:
        requests = os.path.join(tmp, "tf_serving_warmup_requests")
        _write_requests(requests, input_name, examples)
        # The sandbox works in a folder of its own: a relative model path (the default
        # pipeline root is relative) is made absolute first.
        served = model_dir if fileio.is_remote(model_dir) else os.path.abspath(model_dir)
        try:
            out = run_isolated(
                serve,
                (served, requests, repeats, load_timeout, tmp),
                what="The InfraValidator's sandbox",
                timeout=limit,
                name="infra-sandbox",
            )
        except UserCodeTimeout:
            return InfraResult(
                False, (f"the sandbox did not finish within {limit:.0f} s",), None, {}
            )
        except UserCodeExit as e:  # the model's load or a request crashed the process
            return InfraResult(False, (f"the sandbox process failed: {e}",), None, {})
        latency = {int(k): v for k, v in out["latency_ms"].items()}
        result = InfraResult(
            not out["problems"], tuple(out["problems"]), out.get("load_seconds"), latency
        )
        if result.blessed:
            _install_warmup(requests, model_dir)
    return result


def _install_warmup(requests: str, model_dir: str) -> None:
    """Copies the warm-up records into ``model_dir/assets.extra/`` (temporary name, rename)."""
    target = fileio.join(model_dir, WARMUP_FILE)
    fileio.makedirs(os.path.dirname(target))
    partial = target + ".partial"
    fileio.copy(requests, partial, overwrite=True)
    fileio.rename(partial, target, overwrite=True)


def describe(result: InfraResult) -> str:
    """One line for the summary."""
    if not result.blessed:
        return "not blessed: " + "; ".join(result.problems)
    lat = ", ".join(
        f"batch {n}: p50 {v['p50']:.1f} ms p99 {v['p99']:.1f} ms"
        for n, v in sorted(result.latency_ms.items())
    )
    if result.endpoint:
        return f"served by {result.endpoint}; {lat}"
    return f"loaded in {result.load_seconds:.1f} s; {lat}"
