"""A test-only stand-in for TF Serving's gRPC PredictionService (TF Serving's server binary
cannot be installed on these machines).

It loads one SavedModel with TensorFlow and answers ``Predict`` as TF Serving does for a
model served under ``MODEL_NAME``: the request's ``serving_default`` (or named) signature
called on its input tensors, the outputs as TensorProtos; another model name is
``NOT_FOUND`` with TF Serving's message. The servicer base class, the stub and the protos
are tensorflow-serving-api's. It is what ``--serving_endpoint`` is tested against, not
TF Serving itself (docs/model-checks.md).

Usage::

    python tf_serving_standin.py MODEL_NAME MODEL_DIR PORT
"""

import sys
from concurrent import futures

import grpc
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc


class _Predictions(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, name: str, model_dir: str):
        self.name = name
        self.model = tf.saved_model.load(model_dir)

    def Predict(self, request, context):  # noqa: N802  gRPC's method name
        if request.model_spec.name != self.name:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"Servable not found for request: Latest({request.model_spec.name})",
            )
        signature = request.model_spec.signature_name or "serving_default"
        fn = self.model.signatures[signature]
        inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
        outputs = fn(**inputs)
        response = predict_pb2.PredictResponse()
        response.model_spec.name = self.name
        response.model_spec.signature_name = signature
        for key, value in outputs.items():
            response.outputs[key].CopyFrom(tf.make_tensor_proto(value.numpy()))
        return response


def main(name: str, model_dir: str, port: str) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        _Predictions(name, model_dir), server
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()  # after the model loaded: a connection means it can answer
    server.wait_for_termination()


if __name__ == "__main__":
    main(*sys.argv[1:4])
