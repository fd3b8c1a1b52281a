"""The InfraValidator's requests sent to a running TF Serving server (``--serving_endpoint``).

One concept: TF Serving's gRPC ``PredictionService`` as a client of the serving check.
The requests are the sandbox's (``PredictRequest`` protos for ``serving_default`` in
batches of 1, 8 and 32, from raw eval examples), with ``model_spec.name`` the model name
the server serves (``--serving_model_name``); the checks are the sandbox's: every request
answered, the outputs the signature declares, of its shapes, finite, and p50/p99 latency
per batch size (after one untimed call, as TF Serving's warm-up). The server must be
serving the model being validated (e.g. started with ``--model_base_path`` on a folder
holding it); its load time is the server's and is not measured here.

gRPC (TF Serving's port 8500), not the REST API: ``tensorflow-serving-api`` (already a
dependency, for the warm-up file) ships the service's stub and the request protos the
warm-up file holds, so the requests sent are byte for byte the ones TF Serving replays.

Example::

    result = query_endpoint("localhost:8500", requests, {"outputs": [None, 3]}, repeats=20)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Optional

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.engine.artifacts import InfraResult

__all__ = ["CONNECT_TIMEOUT", "check_endpoint", "query_endpoint"]

# Seconds to wait for the server's gRPC channel to be ready.
CONNECT_TIMEOUT = 10.0
# Seconds one Predict call may take.
_CALL_TIMEOUT = 60.0


def _channel(endpoint: str):
    """A ready gRPC channel to ``endpoint``.

    Raises:
      PipelineError: the connection fails (refused, unknown host) or is not ready within
        :data:`CONNECT_TIMEOUT`.
    """
    import grpc

    channel = grpc.insecure_channel(endpoint)
    # Not grpc.channel_ready_future: it retries a refused connection until its timeout;
    # the first failed attempt already says that nothing answers there.
    settled = threading.Event()
    state: list = []

    def seen(s) -> None:
        if s in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE):
            state.append(s)
            settled.set()

    channel.subscribe(seen, try_to_connect=True)
    settled.wait(CONNECT_TIMEOUT)
    channel.unsubscribe(seen)
    if state[:1] != [grpc.ChannelConnectivity.READY]:
        channel.close()
        why = "the connection failed" if state else f"not ready within {CONNECT_TIMEOUT:g} s"
        raise PipelineError(
            f"--serving_endpoint {endpoint} cannot be reached ({why}); start TF Serving there "
            "(its gRPC port, 8500 by default) or drop the flag to validate the model in the "
            "sandbox."
        )
    return channel


def check_endpoint(endpoint: str) -> None:
    """Refuses an endpoint nothing answers at (before a run's first Beam job).

    Raises:
      PipelineError: as :func:`query_endpoint`.
    """
    _channel(endpoint).close()


def _problems(response, declared: dict[str, list[Optional[int]]], n: int) -> list[str]:
    """What is wrong with a PredictResponse to an ``n``-example request (the sandbox's
    checks: the declared outputs, of the declared shapes, finite)."""
    import tensorflow as tf

    from beam_pipeline.stages.infra_validator.sandbox import output_problems

    problems = []
    missing = sorted(set(declared) - set(response.outputs))
    if missing:
        problems.append(
            f"the answer to the {n}-example request lacks output(s) {missing} that the model "
            f"declares (it has {sorted(response.outputs)}): is the server serving this model?"
        )
    for name, proto in response.outputs.items():
        problems += output_problems(name, tf.make_ndarray(proto), declared, n)
    return problems


def query_endpoint(
    endpoint: str,
    requests: Sequence,
    declared: dict[str, list[Optional[int]]],
    repeats: int,
):
    """Sends each ``PredictRequest`` ``repeats`` + 1 times to the server at ``endpoint``.

    Args:
      endpoint: ``HOST:PORT`` of TF Serving's gRPC API.
      requests: ``PredictRequest`` protos, ``model_spec.name`` set.
      declared: the model's serving_default outputs and their shapes (None: any size).
      repeats: timed calls per request (for the percentiles), after one untimed call.

    Returns:
      an :class:`~beam_pipeline.engine.artifacts.InfraResult` (``load_seconds`` None).

    Raises:
      PipelineError: the endpoint cannot be reached.
    """
    import grpc
    import numpy as np
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    channel = _channel(endpoint)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    problems: list[str] = []
    latency: dict[int, dict[str, float]] = {}
    try:
        for request in requests:
            n = next(iter(request.inputs.values())).tensor_shape.dim[0].size
            times = []
            try:
                for i in range(repeats + 1):
                    t = time.perf_counter()
                    response = stub.Predict(request, timeout=_CALL_TIMEOUT)
                    if i:
                        times.append((time.perf_counter() - t) * 1000)
            except grpc.RpcError as e:
                problems.append(
                    f"a request of {n} examples to {endpoint} failed: {e.code().name}: "
                    f"{e.details()}"
                )
                continue
            problems += _problems(response, declared, n)
            latency[n] = {
                "p50": float(np.percentile(times, 50)),
                "p99": float(np.percentile(times, 99)),
            }
    finally:
        channel.close()
    return InfraResult(not problems, tuple(problems), None, latency, endpoint)
