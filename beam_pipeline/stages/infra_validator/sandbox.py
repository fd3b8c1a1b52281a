"""The InfraValidator's sandbox: loads a SavedModel and replays TF Serving requests to it.

Run as a script in a fresh ``python -I`` process, as a model server would load the model:
it imports only TensorFlow, NumPy and TF Serving's request protos, never this package or
the user's module file (it is run by path, not imported). Arguments: the model folder, a
TFRecord file of ``PredictionLog`` records (the warm-up file), the repeats per request and
the load time limit in seconds. It prints one JSON object: ``load_seconds``,
``latency_ms`` (batch size -> p50/p99 over the repeats, after one untimed call, as TF
Serving's warm-up), ``problems`` (the loader's or a request's message, a wrong shape, a
non-finite output) and ``foreign_modules`` (any of this project's packages it imported).

Usage::

    python -I sandbox.py MODEL_DIR REQUESTS.tfrecord 20 60
"""

import json
import sys
import time


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def _check_outputs(result, declared, n, problems):
    import numpy as np

    for name, value in result.items():
        shape = value.shape.as_list()
        want = declared.get(name, shape)
        fits = len(want) == len(shape) and shape[0] == n
        fits = fits and all(w is None or w == s for w, s in zip(want[1:], shape[1:]))
        if not fits:
            problems.append(
                f"output {name} of a {n}-example request has shape {shape}, declared {want}"
            )
        if value.dtype.is_floating and not np.all(np.isfinite(value.numpy())):
            problems.append(f"output {name} of a {n}-example request is not finite")


def _without_scikit_learn() -> None:
    """Leaves scikit-learn out of this process, as a model server has none.

    Keras 3 imports it with TensorFlow wherever it is installed (``keras.wrappers``' estimators;
    this project installs it for keras-tuner's BayesianOptimization): scipy's and
    scikit-learn's imports, about a CPU second and a fifth of the sandbox's, which nothing
    here uses: a SavedModel's functions cannot call them. ``None`` in ``sys.modules``
    makes ``import sklearn`` raise ImportError, which Keras takes as not installed.
    """
    sys.modules.setdefault("sklearn", None)


def main(model_dir: str, requests_path: str, repeats: int, load_timeout: float) -> dict:
    _without_scikit_learn()  # before TensorFlow's import, which would import it
    import numpy as np
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    out = {"problems": [], "latency_ms": {}}
    start = time.perf_counter()
    try:
        fn = tf.saved_model.load(model_dir).signatures["serving_default"]
    except Exception as e:  # noqa: BLE001  the loader's message is the report
        out["problems"].append(f"the model does not load: {_first_line(e)}")
        return out
    out["load_seconds"] = time.perf_counter() - start
    if out["load_seconds"] > load_timeout:
        out["problems"].append(
            f"the model took {out['load_seconds']:.1f} s to load, over the {load_timeout:g} s limit"
        )
    declared = {k: v.shape.as_list() for k, v in fn.structured_outputs.items()}
    for record in tf.data.TFRecordDataset(requests_path):
        request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
        n = int(next(iter(inputs.values())).shape[0])
        times = []
        try:
            for i in range(repeats + 1):  # the first call traces the function: untimed
                t = time.perf_counter()
                result = fn(**inputs)
                if i:
                    times.append((time.perf_counter() - t) * 1000)
        except Exception as e:  # noqa: BLE001  the request's error is the report
            out["problems"].append(f"a request of {n} examples failed: {_first_line(e)}")
            continue
        _check_outputs(result, declared, n, out["problems"])
        out["latency_ms"][n] = {
            "p50": float(np.percentile(times, 50)),
            "p99": float(np.percentile(times, 99)),
        }
    ours = ("beam_pipeline", "trainer", "transforms")
    out["foreign_modules"] = sorted(m for m in ours if m in sys.modules)
    return out


if __name__ == "__main__":
    model, requests, reps, limit = sys.argv[1:5]
    print(json.dumps(main(model, requests, int(reps), float(limit))))
