"""The InfraValidator's sandbox: loads a SavedModel and replays TF Serving requests to it.

:func:`serve` runs in a process of its own, forked from the warm fork server
(:func:`trainer.isolation.run_isolated`, as the user's training code is), and loads the
model there as a model server would. Why a fork and not a fresh ``python -I`` interpreter
(which this was): the fresh one paid TensorFlow's import, seconds of CPU, for a load that
takes a fraction of one. The fork is as clean for this check: the server imported
TensorFlow, Keras, tf.Transform, Beam and this package's stage modules, never a module
file, and those imports register no TensorFlow op beyond TensorFlow's own (the op registry
after them equals a bare ``import tensorflow``'s), while a SavedModel's load reaches
Python code only through registered ops. What the model needs must be in the SavedModel,
as for a server. A model whose load crashes its process ends the fork, not the run.

It reads the model folder and a TFRecord file of ``PredictionLog`` records (the warm-up
file) and returns ``load_seconds``, ``latency_ms`` (batch size -> p50/p99 over the
repeats, after one untimed call, as TF Serving's warm-up) and ``problems`` (the loader's or
a request's message, a wrong shape, a non-finite output).

Example::

    report = run_isolated(serve, (model_dir, requests, 20, 60.0, folder), what="...")
"""

import os
import time

from beam_pipeline.core.gpus import gpu_environment


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def output_problems(name: str, value, declared: dict, n: int) -> list[str]:
    """What is wrong with output ``name`` (a NumPy array) of the answer to an ``n``-example
    request: a shape other than the declared one (``declared``: output -> shape, None for
    any size) or non-finite values. The sandbox's answers and a TF Serving server's
    (:mod:`beam_pipeline.stages.infra_validator.endpoint`) are checked alike."""
    import numpy as np
    import tensorflow as tf

    problems = []
    shape = list(value.shape)
    want = declared.get(name, shape)
    fits = len(want) == len(shape) and bool(shape) and shape[0] == n
    fits = fits and all(w is None or w == s for w, s in zip(want[1:], shape[1:]))
    if not fits:
        problems.append(
            f"output {name} of the {n}-example request has shape {shape}, declared {want}"
        )
    # TensorFlow's dtype: NumPy does not count bfloat16 as floating.
    if tf.as_dtype(value.dtype).is_floating and not np.all(np.isfinite(value)):
        problems.append(f"output {name} of the {n}-example request is not finite")
    return problems


def serve(
    model_dir: str, requests_path: str, repeats: int, load_timeout: float, folder: str, *, doing
) -> dict:
    """The report on ``model_dir`` (the module's docstring), in ``folder`` as working
    directory. ``doing`` is :func:`trainer.isolation.run_isolated`'s callback (unused: the
    sandbox does one thing)."""
    os.chdir(folder)
    gpu_environment(os.environ)  # a GPU serving host: read when TensorFlow first uses one
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
        for name, value in result.items():
            out["problems"] += output_problems(name, value.numpy(), declared, n)
        out["latency_ms"][n] = {
            "p50": float(np.percentile(times, 50)),
            "p99": float(np.percentile(times, 99)),
        }
    return out
