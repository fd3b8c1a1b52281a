#!/usr/bin/env python3
"""Is the trainer fed? Examples/s of its input path, of ``fit`` on cached batches, of the run.

  python benchmarks/bench_trainer.py [--rows N] [--steps S] [--mixed_precision] [--work DIR]

Builds a synthetic dataset (``--rows`` rows, 32 float features and a label), runs the
pipeline's data stages and Transform on it through the CLI with
``benchmarks/compute_module.py``, then measures, with that module's compute-bound
``ComputeSpec`` (4 Dense layers of 2048, batch 1024):

- ``input``: the input path alone: the spec's training dataset as the runner builds it
  (``DataAccessor.tf_dataset_factory`` over the transformed examples, kept in memory
  after its first pass when small, the model's inputs selected), iterated without a
  model after one pass (``input_first_pass``: during it); and its pieces: reading and
  decompressing the records only, and TFXIO's dataset as it comes;
- ``fit_cached``: ``model.fit`` on 8 batches held in memory (the step rate with a free
  input: what the model alone can do here);
- ``fit``: ``model.fit`` on the runner's dataset (what training gets);
- ``handwritten_xla``: the ceiling: the same model and optimizer, built without a
  strategy, trained by a hand-written loop (one ``tf.function(jit_compile=True)`` call
  runs ``--inner_steps`` steps, gradient tape and ``apply_gradients``, over the cached
  batches held on the device): what the card does when nothing but the math is left;
- ``run_spec``: the runner's whole TrainSpec loop (``trainer.spec.run_spec``: fit,
  checkpoints, evaluation and export) for ``--run_steps`` steps, wall time.

Where ``nvidia-smi`` exists, the GPU's utilization is sampled during each phase (mean
of samples every 200 ms). The result goes to ``benchmarks/results/trainer_<stamp>.json``
(``--out``): machine (cores, RAM, date, device), figures, and ``input / fit_cached``, the
input path's margin over the compute-bound step rate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MODULE = os.path.join(HERE, "compute_module.py")
sys.path.insert(0, REPO)

from beam_pipeline.core.gpus import gpu_environment  # noqa: E402

gpu_environment(os.environ)  # as the CLI does, before TensorFlow is imported


def make_csv(path: str, rows: int, seed: int = 0) -> None:
    import numpy as np

    sys.path.insert(0, HERE)
    from compute_module import FEATURES, LABEL

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, len(FEATURES))).astype("float32")
    y = ((x[:, 0] + x[:, 1] - x[:, 2] + rng.normal(scale=0.5, size=rows)) > 0).astype("int64")
    with open(path, "w") as f:
        f.write(",".join([*FEATURES, LABEL]) + "\n")
        for start in range(0, rows, 10_000):
            block = x[start : start + 10_000]
            labels = y[start : start + 10_000]
            f.writelines(
                ",".join(f"{v:.5g}" for v in row) + f",{label}\n"
                for row, label in zip(block, labels)
            )


def transform(work: str, csv: str, module: str, beam_args: list[str]) -> str:
    """The data stages and Transform through the CLI; returns the pipeline root."""
    root = os.path.join(work, "root")
    cmd = [
        sys.executable,
        "-m",
        "beam_pipeline",
        f"--data={csv}",
        f"--module_file={module}",
        f"--pipeline_root={root}",
        "--run_id=bench_trainer",
        "--trainer_entry_point=ComputeSpec",
        "--no_tuner",
        "--no_trainer",
        "--no_evaluator",
        "--no_infra_validator",
        "--no_progress",
        *beam_args,
    ]
    path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    # CPU work only: its TensorFlow leaves the GPU to the measured phases.
    env = dict(os.environ, PYTHONPATH=path, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the data stages failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return root


class GpuUtilization:
    """Samples ``nvidia-smi``'s GPU utilization every 200 ms while in use; None without it."""

    def __init__(self) -> None:
        self.tool = shutil.which("nvidia-smi")

    @contextlib.contextmanager
    def sample(self, into: dict, key: str):
        if self.tool is None:
            into[key] = None
            yield
            return
        out = tempfile.TemporaryFile("w+")
        proc = subprocess.Popen(
            [
                self.tool,
                "--query-gpu=utilization.gpu",
                "--format=csv,noheader,nounits",
                "-lms",
                "200",
            ],
            stdout=out,
            stderr=subprocess.DEVNULL,
        )
        try:
            yield
        finally:
            proc.terminate()
            proc.wait()
            out.seek(0)
            values = [float(v) for v in out.read().split() if v.replace(".", "").isdigit()]
            into[key] = round(sum(values) / len(values), 1) if values else None


def rate_of(dataset, batches: int, batch_size: int, warmup: int = 3) -> float:
    """Examples/s of iterating ``batches`` batches of ``dataset`` (after ``warmup``)."""
    it = iter(dataset)
    for _ in range(warmup):
        next(it)
    start = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches * batch_size / (time.perf_counter() - start)


def fit_rate(model, dataset, steps: int, batch_size: int, warmup: int) -> tuple[float, float]:
    """(examples/s, ms/step) of ``model.fit`` on ``dataset`` over ``steps`` steps, timed
    after a fit of ``warmup`` steps (tracing, XLA compilation, the first batches)."""
    model.fit(dataset, steps_per_epoch=warmup, epochs=1, verbose=0)
    start = time.perf_counter()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
    seconds = time.perf_counter() - start
    return steps * batch_size / seconds, 1000 * seconds / steps


def handwritten_rate(
    spec, hp, cached, steps: int, batch_size: int, inner: int
) -> tuple[float, float]:
    """(examples/s, ms/step) of a hand-written XLA training loop on cached batches.

    The model, loss and optimizer come from the spec, built outside any strategy (one
    device: the ceiling of one card). One compiled call runs ``inner`` steps in a
    ``tf.while_loop`` over 8 batches stacked on the device, so neither Python nor the
    input is between two steps; it is timed over ``steps`` steps after one untimed call
    (tracing and XLA compilation).
    """
    import tensorflow as tf

    batches = list(cached.take(8))
    keys = sorted(batches[0][0])
    xs = {k: tf.stack([b[0][k] for b in batches]) for k in keys}
    ys = tf.stack([b[1] for b in batches])
    model, loss_fn, optimizer = spec.model(hp), spec.loss(hp), spec.optimizer(hp)
    model({k: v[0] for k, v in xs.items()})  # builds the weights
    optimizer.build(model.trainable_variables)
    weights = model.trainable_variables

    @tf.function(jit_compile=True)
    def train(n):
        def step(i, total):
            j = i % len(batches)
            with tf.GradientTape() as tape:
                loss = loss_fn(ys[j], model({k: v[j] for k, v in xs.items()}, training=True))
                scaled = optimizer.scale_loss(loss) if hasattr(optimizer, "scale_loss") else loss
            optimizer.apply_gradients(zip(tape.gradient(scaled, weights), weights))
            return i + 1, total + tf.cast(loss, tf.float32)

        return tf.while_loop(lambda i, _: i < n, step, (tf.constant(0), tf.constant(0.0)))[1]

    calls = max(1, steps // inner)
    float(train(tf.constant(inner)))  # traced and compiled
    start = time.perf_counter()
    for _ in range(calls):
        total = train(tf.constant(inner))
    float(total)  # waits for the device
    seconds = time.perf_counter() - start
    return calls * inner * batch_size / seconds, 1000 * seconds / (calls * inner)


def machine() -> dict:
    with open("/proc/meminfo") as f:
        ram_kib = int(f.readline().split()[1])
    return {
        "nproc": os.cpu_count(),
        "ram_gib": round(ram_kib / 2**20, 1),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20_000, help="rows of the synthetic dataset")
    p.add_argument("--steps", type=int, default=10, help="timed training steps per phase")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before each phase")
    p.add_argument("--input_batches", type=int, default=40, help="batches read by the input phases")
    p.add_argument(
        "--run_steps", type=int, default=20, help="steps of the run_spec phase (0: skip)"
    )
    p.add_argument(
        "--inner_steps", type=int, default=25, help="steps per call of the handwritten_xla loop"
    )
    p.add_argument("--mixed_precision", action="store_true")
    p.add_argument("--work", help="working folder (default: a temporary one, removed)")
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="folder of the JSON result")
    p.add_argument("--note", default="", help="recorded with the figures")
    p.add_argument(
        "--beam_arg",
        action="append",
        default=[],
        help="a Beam flag for the data stages' run, e.g. --beam_arg=--direct_num_workers=8",
    )
    p.add_argument(
        "--prepare_only", action="store_true", help="make the data and transform it, then stop"
    )
    args = p.parse_args(argv)

    work = args.work or tempfile.mkdtemp(prefix="bench_trainer_")
    os.makedirs(work, exist_ok=True)
    result: dict = {
        "benchmark": "trainer",
        "machine": machine(),
        "args": vars(args),
        "note": args.note,
    }
    gpu = GpuUtilization()
    utilization: dict = {}
    timings: dict = {}

    started = time.perf_counter()
    csv = os.path.join(work, "data.csv")
    if not os.path.exists(csv):
        make_csv(csv, args.rows)
    # The module in a folder of its own: the run stages the module's folder with it.
    module = os.path.join(work, "module", "compute_module.py")
    os.makedirs(os.path.dirname(module), exist_ok=True)
    shutil.copy(MODULE, module)
    root = os.path.join(work, "root")
    if not os.path.isdir(os.path.join(root, "runs", "bench_trainer", "transform_graph")):
        transform(work, csv, module, args.beam_arg)
    timings["data_and_transform_s"] = round(time.perf_counter() - started, 1)
    if args.prepare_only:
        print(f"data and transform ready in {work} ({timings['data_and_transform_s']} s)")
        return {}

    import tensorflow as tf

    from beam_pipeline.engine.run_dir import RunDirectory
    from beam_pipeline.flags import parse_config
    from beam_pipeline.stages.trainer.training import build_training_job
    from trainer.job import common_fn_args
    from trainer.spec import (
        compile_model,
        make_spec,
        model_datasets,
        run_spec,
        steps_per_execution,
    )
    from trainer.strategy import choose_strategy, describe

    sys.path.insert(0, HERE)
    from compute_module import ComputeSpec

    run_dir = RunDirectory(root, "bench_trainer")
    flags = [f"--data={csv}", f"--module_file={module}", f"--train_steps={max(1, args.run_steps)}"]
    config = parse_config(flags + (["--mixed_precision"] if args.mixed_precision else []))
    job = build_training_job(config, run_dir, entry_point="ComputeSpec")
    strategy = choose_strategy()
    info = describe(strategy)
    gpus = tf.config.list_physical_devices("GPU")
    result["device"] = {
        "replicas": info.num_replicas,
        "devices": list(info.devices),
        "gpus": [
            tf.config.experimental.get_device_details(g).get("device_name", g.name) for g in gpus
        ],
        "tensorflow": tf.__version__,
    }
    model_run = os.path.join(work, "model_run")
    shutil.rmtree(model_run, ignore_errors=True)
    fn_args = common_fn_args(
        job,
        model_run,
        strategy=strategy,
        model_run_dir=model_run,
        serving_model_dir=os.path.join(model_run, "export"),
    )
    spec = make_spec(ComputeSpec, fn_args)
    hp = spec.default_hyperparameters()
    batch = spec.batch_size
    with strategy.scope():
        model = compile_model(spec, hp)
    train_ds, _ = model_datasets(spec, hp, model)
    result["policy"] = fn_args.mixed_precision or "float32"

    # The input path and its pieces.
    from tfx_bsl.public import tfxio

    files = [f for pattern in job.train_files for f in tf.io.gfile.glob(pattern)]
    records = (
        tf.data.Dataset.from_tensor_slices(files)
        .interleave(
            lambda f: tf.data.TFRecordDataset(f, "GZIP"), num_parallel_calls=tf.data.AUTOTUNE
        )
        .repeat()
        .batch(batch)
    )
    plain_tfxio = fn_args.data_accessor.tf_dataset_factory(
        job.train_files,
        tfxio.TensorFlowDatasetOptions(batch_size=batch, label_key=spec.label_key),
        spec.tf_transform_output.transformed_metadata.schema,
    )
    rates: dict = {}
    epoch = int(fn_args.num_examples["train"]) // batch  # batches in one pass
    # The whole first pass, its first batch included: the runner's shuffle of the cached
    # batches holds one pass, so the first batch comes once the pass is read.
    rates["input_first_pass"] = rate_of(train_ds, epoch, batch, warmup=0)
    with gpu.sample(utilization, "input"):
        # After a whole pass (training runs many): what the steps get from then on.
        rates["input"] = rate_of(train_ds, args.input_batches, batch, warmup=epoch + 1)
    rates["input_read_decompress_only"] = rate_of(records, args.input_batches, batch)
    rates["input_tfxio_as_is"] = rate_of(plain_tfxio, args.input_batches, batch)
    result["train_files"] = len(files)
    result["train_batches_per_pass"] = epoch
    result["steps_per_execution"] = steps_per_execution(spec, args.steps, args.warmup)

    # The model with a free input, then with the runner's input; one step per call first
    # (Keras's default), then the runner's steps_per_execution.
    cached = train_ds.take(8).cache().repeat()
    with gpu.sample(utilization, "fit_cached_one_step_per_call"):
        rates["fit_cached_one_step_per_call"], ms_one = fit_rate(
            model, cached, args.steps, batch, args.warmup
        )
    timings["fit_cached_one_step_per_call_ms_per_step"] = round(ms_one, 2)
    model.steps_per_execution = steps_per_execution(spec, args.steps, args.warmup)
    model.make_train_function(force=True)
    with gpu.sample(utilization, "fit_cached"):
        rates["fit_cached"], ms_cached = fit_rate(model, cached, args.steps, batch, args.warmup)
    with gpu.sample(utilization, "fit"):
        rates["fit"], ms_fit = fit_rate(model, train_ds, args.steps, batch, args.warmup)
    with gpu.sample(utilization, "handwritten_xla"):
        rates["handwritten_xla"], ms_xla = handwritten_rate(
            spec, hp, cached, args.steps, batch, min(args.inner_steps, args.steps)
        )
    timings["handwritten_xla_ms_per_step"] = round(ms_xla, 2)
    timings["fit_cached_ms_per_step"] = round(ms_cached, 2)
    timings["fit_ms_per_step"] = round(ms_fit, 2)

    if args.run_steps:
        with gpu.sample(utilization, "run_spec"):
            start = time.perf_counter()
            outcome = run_spec(ComputeSpec, fn_args)
            seconds = time.perf_counter() - start
        rates["run_spec_end_to_end"] = outcome.final_step * batch / seconds
        timings["run_spec_s"] = round(seconds, 2)

    result["examples_per_s"] = {k: round(v) for k, v in rates.items()}
    result["input_over_fit_cached"] = round(rates["input"] / rates["fit_cached"], 2)
    result["fit_over_fit_cached"] = round(rates["fit"] / rates["fit_cached"], 2)
    # The yardsticks: the runner's steady steps against the hand-written ceiling.
    result["fit_cached_over_handwritten_xla"] = round(
        rates["fit_cached"] / rates["handwritten_xla"], 2
    )
    result["fit_over_handwritten_xla"] = round(rates["fit"] / rates["handwritten_xla"], 2)
    result["gpu_utilization_pct"] = utilization
    result["timings"] = timings
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"trainer_{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    print(f"wrote {path}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
