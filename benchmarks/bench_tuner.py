"""Benchmark: 8 trials of one small model, plain ``keras_tuner`` search vs. the Tuner stage.

(a) sequential: the module's ``tuner_fn`` and ``tuner.search(**fit_kwargs)`` in one
    process, as keras-tuner (and TFX's Tuner) run it: one trial after another.
(b) stage: :func:`beam_pipeline.stages.tuner.tuning.run_tuning_stage` on the DirectRunner in
    multi_processing mode with 2 workers, 2 trials at a time, trials capped to 1 TF thread,
    per schedule (``--schedules``): rolling (a freed worker starts the next trial at once,
    each trial its own small job), rounds (each round waits for its slowest trial) and
    search_job (one job; each worker's loop claims trials from the shared oracle state).
    ``--repeats N`` runs every phase N times, interleaved; the medians are reported.

Same module, same seed (so the same 8 learning rates), same steps. Every trial builds the
same architecture (2 x 16 units; only the learning rate varies), so trials cost the same.
Each phase runs in a fresh Python process; what is timed starts after the imports.

Figures:
  sequential_s / stage_s: wall time of the search (b: with a warm worker pool);
  pool_start_s: starting the 2 worker processes (imports), once per search; the stage
    starts it itself (overlapping the launcher's own tuner_fn call) unless given one;
  speedup_warm = sequential_s / stage_s; speedup_cold = sequential_s / (pool_start_s +
    stage_s);
  overhead_per_trial_s: what the fan-out costs a worker per trial beyond the trial
    itself (asking and updating the oracle, the trial's Beam job, bundles, result files):
    rolling: the mean of (trial's job wall time, launch to report - the trial's own
    seconds); search_job: the mean of (claim to report - the trial's own seconds);
    rounds: (sum of the rounds' wall times - sum over rounds of the round's
    slowest trial) / trials;
  idle_per_trial_s: (workers x search wall time - the trials' own seconds) / trials: all
    the time a worker does not train, fan-out, barriers and fixed costs included;
  fixed_s: once per search (the launcher's own tuner_fn call, writing the tables and the
    plot, publishing): stage_s - the rounds' wall times (rounds), stage_s - the span from
    the first trial's start to the last trial's report (rolling);
  cores_busy: CPU seconds / wall seconds of the search (b: the launcher and the pool's
    processes); launcher_cpu_s: the launching process's share (oracle, jobs, tables);
  speedup_ceiling: sequential_s / the wall time of a control, two plain keras-tuner
    searches of trials/2 each run side by side without Beam, their TF threads capped as
    the stage's workers are: what 2-way parallelism can
    give on this machine once two trainings slow each other down;
  machine load: /proc/loadavg before and after each phase and the CPU seconds other
    processes used during it (as a share of one core).

``--early_stopping``: instead, the same search space and trial budget three ways, one
stage run per seed (``--seeds``, default 1,2,3) on a warm pool of ``--parallel`` workers:
plain RandomSearch, RandomSearch with ``--tuner_early_stopping=asha``, and keras-tuner's
Hyperband (``max_epochs=--epochs``, capped at ``--trials`` trials); per variant the mean
best objective (and its range over the seeds), trial-epochs (the epochs all trials
trained: the load-independent cost) and wall time. Writes
``benchmarks/results/tuner_early_stopping_<cores>cores_<stamp>.json``.

Usage (from the repository root; writes benchmarks/results/tuner_<stamp>.json)::

    .venv/bin/python benchmarks/bench_tuner.py [--train_steps 200] [--trials 8]
    .venv/bin/python benchmarks/bench_tuner.py --early_stopping --epochs 9 --train_steps 10
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "benchmarks", "out", "tuner")
RESULTS = os.path.join(REPO, "benchmarks", "results")

MODULE = '''
"""The benchmark's module: the penguin features, a fixed 2 x 16 DNN, a log-uniform rate."""
import time

import keras
import keras_tuner
import tensorflow_transform as tft
from tfx_bsl.public import tfxio

from trainer import FnArgs, TunerFnResult

FEATURES = ["bill_length_mm_xf", "bill_depth_mm_xf", "flipper_length_mm_xf", "body_mass_g_xf"]


def _dataset(files, data_accessor, tf_transform_output, batch_size):
    return data_accessor.tf_dataset_factory(
        files,
        tfxio.TensorFlowDatasetOptions(batch_size=batch_size, label_key="species_xf"),
        tf_transform_output.transformed_metadata.schema,
    )


def _build(hp):
    inputs = {k: keras.Input(shape=(1,), name=k) for k in FEATURES}
    d = keras.layers.Concatenate()(list(inputs.values()))
    for _ in range(2):
        d = keras.layers.Dense(16, activation="relu")(d)
    model = keras.Model(inputs, keras.layers.Dense(3)(d))
    model.compile(
        optimizer=keras.optimizers.Adam(hp.Float("learning_rate", 1e-4, 1e-1, sampling="log")),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    return model


class WaitingSearch(keras_tuner.RandomSearch):
    """--wait_s: a trial waits instead of training (measures the scheduling alone)."""

    def __init__(self, *args, wait_s: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.wait_s = wait_s

    def run_trial(self, trial, *args, **kwargs):
        time.sleep(self.wait_s)
        return {"val_sparse_categorical_accuracy": trial.hyperparameters["learning_rate"]}


def tuner_fn(fn_args: FnArgs) -> TunerFnResult:
    custom = fn_args.custom_config
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
    search, extra = keras_tuner.RandomSearch, {"max_trials": custom["trials"]}
    if custom.get("wait_s"):
        search, extra = WaitingSearch, {"wait_s": custom["wait_s"], **extra}
    if custom.get("hyperband"):  # its own brackets; the stage caps it at --trials
        search, extra = keras_tuner.Hyperband, {"max_epochs": custom["epochs"], "factor": 3}
    tuner = search(
        _build,
        **extra,
        seed=custom["seed"],
        objective=keras_tuner.Objective(*custom["objective"]),
        directory=fn_args.working_dir,
        project_name="bench",
    )
    return TunerFnResult(
        tuner=tuner,
        fit_kwargs={
            "x": _dataset(fn_args.train_files, fn_args.data_accessor, tf_transform_output, 20),
            "validation_data": _dataset(
                fn_args.eval_files, fn_args.data_accessor, tf_transform_output, 10
            ),
            "steps_per_epoch": fn_args.train_steps,
            "validation_steps": fn_args.eval_steps,
            "epochs": custom.get("epochs", 1),
            "verbose": 0,
        },
    )
'''


def _loadavg() -> list[float]:
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def _busy_cpu_s() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pid_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _make_data(root: str) -> str:
    """The bundled penguin data through the CLI's data stages; returns the run folder."""
    run = os.path.join(root, "runs", "data")
    if os.path.exists(os.path.join(run, "transformed_examples", "_PUBLISHED")):
        return run
    shutil.rmtree(root, ignore_errors=True)
    from beam_pipeline import cli

    code = cli.main(
        [
            "--runner=DirectRunner",
            f"--pipeline_root={root}",
            "--run_id=data",
            "--no_trainer",
            "--no_tuner",
        ]
    )
    if code:
        raise SystemExit(f"the data stages failed with exit code {code}")
    return run


# The objectives --objective offers, with their directions. The accuracy saturates at 1.0
# on this data within an epoch or two; the loss keeps telling the searches apart.
OBJECTIVES = {"val_sparse_categorical_accuracy": "max", "val_loss": "min"}


def _custom(args) -> dict:
    """The module's custom_config: the search's size, seed and objective, and --wait_s."""
    objective = [args.objective, OBJECTIVES[args.objective]]
    return {"trials": args.trials, "seed": args.seed, "wait_s": args.wait_s, "objective": objective}


def _threads(args) -> int:
    """TF intra-op threads per parallel process: --threads, or cores / --parallel."""
    return args.threads if args.threads >= 0 else max(1, (os.cpu_count() or 1) // args.parallel)


def _phase_sequential(args, run: str, module: str) -> dict:
    import importlib.util

    from trainer import FnArgs
    from trainer.process import limit_threads

    if args.tag.startswith("-pair"):  # the control: capped as the stage caps its workers
        limit_threads(_threads(args))
    spec = importlib.util.spec_from_file_location("bench_module", module)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    work = os.path.join(OUT, f"sequential{args.tag}")
    shutil.rmtree(work, ignore_errors=True)
    fn_args = FnArgs(
        working_dir=work,
        train_files=[os.path.join(run, "transformed_examples", "train", "*.tfrecord.gz")],
        eval_files=[os.path.join(run, "transformed_examples", "eval", "*.tfrecord.gz")],
        train_steps=args.train_steps,
        eval_steps=args.eval_steps,
        transform_graph_path=os.path.join(run, "transform_graph"),
        custom_config=_custom(args),
    )
    start, cpu = time.time(), _self_cpu_s()
    result = mod.tuner_fn(fn_args)
    result.tuner.oracle.verbose = 0
    result.tuner.search(**result.fit_kwargs)
    wall, cpu = time.time() - start, _self_cpu_s() - cpu
    trials = sorted(result.tuner.oracle.trials.values(), key=lambda t: t.trial_id)
    return {
        "sequential_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "cores_busy": round(cpu / wall, 2),
        "learning_rates": [t.hyperparameters.values["learning_rate"] for t in trials],
        "statuses": [t.status for t in trials],
    }


def _phase_stage(args, run: str, module: str) -> dict:
    import dataclasses

    from beam_pipeline.config import PipelineConfig, TrainerConfig, TunerConfig, TunerSchedule
    from beam_pipeline.core.types import Artifact
    from beam_pipeline.engine.run_dir import RunDirectory
    from beam_pipeline.runtime.options import parse_beam_args
    from beam_pipeline.runtime.pool import LocalWorkerPool
    from beam_pipeline.stages.tuner.tuning import run_tuning_stage
    from trainer.module_loader import load_trainer_module

    schedule = TunerSchedule(args.phase.split("-", 1)[1])
    root = os.path.join(OUT, f"stage-{schedule.value}")
    shutil.rmtree(root, ignore_errors=True)
    run_dir = RunDirectory.create(root, "bench")
    for artifact in (Artifact.SCHEMA, Artifact.TRANSFORM_GRAPH, Artifact.TRANSFORMED_EXAMPLES):
        shutil.copytree(os.path.join(run, artifact.value), run_dir.path(artifact))
    config = PipelineConfig(
        module_file=module,
        tuner=TunerConfig(
            parallel_trials=args.parallel,
            schedule=schedule,
            train_steps=args.train_steps,
            eval_steps=args.eval_steps,
        ),
        trainer=dataclasses.replace(TrainerConfig(), custom_config=json.dumps(_custom(args))),
    )
    options = parse_beam_args(
        [
            "--runner=DirectRunner",
            "--direct_running_mode=multi_processing",
            f"--direct_num_workers={args.parallel}",
        ]
    )
    threads = _threads(args)
    # What a pipeline's launcher has done before its Tuner stage (pipeline.run loads the
    # module first; Transform ran): the module and its imports (TensorFlow, Keras 3,
    # tf.Transform) loaded. The sequential phase, too, times nothing of its imports.
    load_trainer_module(module)
    start = time.time()
    with LocalWorkerPool(args.parallel, threads_per_worker=threads) as pool:
        pool.wait_ready()
        pool_start = time.time() - start
        start, own = time.time(), _self_cpu_s()
        workers_cpu = sum(_pid_cpu_s(p) for p in pool.pids)
        report, _ = run_tuning_stage(config, run_dir, options, worker_pool=pool)
        wall = time.time() - start
        own = _self_cpu_s() - own
        cpu = own + sum(_pid_cpu_s(p) for p in pool.pids) - workers_cpu
    with open(run_dir.path(Artifact.TUNER, "trials.json")) as f:
        trials = json.load(f)["trials"]
    trial_s = sum(t["seconds"] for t in trials)
    details = report.details
    if (
        schedule is not TunerSchedule.ROUNDS
    ):  # rolling: launch to report; search_job: claim to report
        jobs = details["trial_job_seconds"]
        overhead = sum(jobs[t["trial_id"]] - t["seconds"] for t in trials) / len(trials)
        first = min(t["started"] for t in trials)
        last = max(t["started"] + jobs[t["trial_id"]] for t in trials)
        fixed = wall - (last - first)
    else:
        rounds: dict[int, float] = {}
        for t in trials:
            rounds[t["round"]] = max(rounds.get(t["round"], 0.0), t["seconds"])
        overhead = (sum(details["round_seconds"]) - sum(rounds.values())) / len(trials)
        fixed = wall - sum(details["round_seconds"])
    return {
        "schedule": schedule.value,
        "stage_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "launcher_cpu_s": round(own, 2),
        "cores_busy": round(cpu / wall, 2),
        "pool_start_s": round(pool_start, 2),
        "rounds": details["rounds"],
        "round_s": details["round_seconds"],
        "setup_s": details["setup_seconds"],
        "mean_trial_s": round(trial_s / len(trials), 2),
        "overhead_per_trial_s": round(overhead, 3),
        "idle_per_trial_s": round((args.parallel * wall - trial_s) / len(trials), 3),
        "fixed_s": round(fixed, 2),
        "workers": sorted({t["worker"] for t in trials}),
        "learning_rates": [t["hyperparameters"]["learning_rate"] for t in trials],
        "statuses": [t["status"] for t in trials],
        "note": report.note,
    }


# --early_stopping: the same search space and trial budget, three ways (each a stage run
# with a warm pool of --parallel workers): plain RandomSearch, RandomSearch with
# --tuner_early_stopping=asha, and keras-tuner's Hyperband (its brackets, capped at
# --trials trials).
EARLY_STOPPING_VARIANTS = ("random", "asha", "hyperband")


def _phase_early_stopping(args, run: str, module: str) -> dict:
    import dataclasses

    from beam_pipeline.config import PipelineConfig, TrainerConfig, TunerConfig, TunerSchedule
    from beam_pipeline.core.types import Artifact
    from beam_pipeline.engine.run_dir import RunDirectory
    from beam_pipeline.runtime.options import parse_beam_args
    from beam_pipeline.runtime.pool import LocalWorkerPool
    from beam_pipeline.stages.tuner.tuning import run_tuning_stage
    from trainer.module_loader import load_trainer_module

    variant = args.phase.split("-", 1)[1]
    root = os.path.join(OUT, f"es-{variant}-{args.seed}")
    shutil.rmtree(root, ignore_errors=True)
    run_dir = RunDirectory.create(root, "bench")
    for artifact in (Artifact.SCHEMA, Artifact.TRANSFORM_GRAPH, Artifact.TRANSFORMED_EXAMPLES):
        shutil.copytree(os.path.join(run, artifact.value), run_dir.path(artifact))
    custom = _custom(args) | {"epochs": args.epochs, "hyperband": variant == "hyperband"}
    config = PipelineConfig(
        module_file=module,
        tuner=TunerConfig(
            parallel_trials=args.parallel,
            schedule=TunerSchedule(args.schedules.split(",")[0]),
            max_trials=args.trials,
            train_steps=args.train_steps,
            eval_steps=args.eval_steps,
            early_stopping="asha" if variant == "asha" else "none",
            asha_reduction_factor=args.asha_reduction_factor,
            asha_min_epochs=args.asha_min_epochs,
        ),
        trainer=dataclasses.replace(TrainerConfig(), custom_config=json.dumps(custom)),
    )
    options = parse_beam_args(
        [
            "--runner=DirectRunner",
            "--direct_running_mode=multi_processing",
            f"--direct_num_workers={args.parallel}",
        ]
    )
    load_trainer_module(module)
    with LocalWorkerPool(args.parallel, threads_per_worker=_threads(args)) as pool:
        pool.wait_ready()
        start = time.time()
        report, _ = run_tuning_stage(config, run_dir, options, worker_pool=pool)
        wall = time.time() - start
    with open(run_dir.path(Artifact.TUNER, "trials.json")) as f:
        trials = json.load(f)["trials"]

    def epochs(t: dict) -> int:
        values = t["hyperparameters"]
        if "tuner/epochs" in values:  # Hyperband: from its initial epoch to its epochs
            return int(values["tuner/epochs"]) - int(values.get("tuner/initial_epoch", 0))
        return t.get("epochs") or args.epochs  # tracked with asha; else the whole fit

    return {
        "variant": variant,
        "seed": args.seed,
        "best_objective": report.details["objective"]["value"],
        "trial_epochs": sum(epochs(t) for t in trials if t["status"] != "FAILED"),
        "wall_s": round(wall, 2),
        "trials": len(trials),
        "statuses": [t["status"] for t in trials],
        "note": report.note,
    }


def _early_stopping_comparison(args, passthrough: list[str]) -> None:
    """--early_stopping: each variant once per seed, interleaved; the table per variant."""
    seeds = [int(s) for s in args.seeds.split(",")]
    runs: dict[str, list[dict]] = {v: [] for v in EARLY_STOPPING_VARIANTS}
    loads = []
    for seed in seeds:
        argv = [a for a in passthrough if not a.startswith("--seed=")] + [f"--seed={seed}"]
        for variant in EARLY_STOPPING_VARIANTS:
            runs[variant].append(_run_phase(f"es-{variant}", argv))
            loads.append(runs[variant][-1]["loadavg_after"][0])

    def mean(values: list[float]) -> float:
        return round(sum(values) / len(values), 4)

    summary = {
        v: {
            key: mean([r[key] for r in group])
            for key in ("best_objective", "trial_epochs", "wall_s")
        }
        | {
            "best_objective_range": [
                min(r["best_objective"] for r in group),
                max(r["best_objective"] for r in group),
            ]
        }
        for v, group in runs.items()
    }
    base = summary["random"]
    for v in EARLY_STOPPING_VARIANTS:
        summary[v]["trial_epochs_vs_random"] = round(
            summary[v]["trial_epochs"] / base["trial_epochs"], 3
        )
        summary[v]["wall_vs_random"] = round(summary[v]["wall_s"] / base["wall_s"], 3)
    when = datetime.datetime.now().strftime("%Y%m%d-%H%M")
    result = {
        "benchmark": "tuner_early_stopping",
        "when": when,
        "machine": f"{os.cpu_count()} cores, {os.uname().nodename}",
        "load_average_1min": {"min": min(loads), "max": max(loads)},
        "settings": vars(args) | {"phase": None},
        "summary": summary,
        "runs": runs,
    }
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"tuner_early_stopping_{os.cpu_count()}cores_{when}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    lines = [
        f"{args.trials} trials of {args.epochs} epochs x {args.train_steps} steps, "
        f"{args.parallel} workers, seeds {args.seeds} (means; load average "
        f"{min(loads)}-{max(loads)})",
        "| | best objective (range) | trial-epochs | wall s |",
        "|---|---|---|---|",
    ]
    for v in EARLY_STOPPING_VARIANTS:
        r = summary[v]
        lo, hi = r["best_objective_range"]
        lines.append(
            f"| {v} | {r['best_objective']:.4f} ({lo:.4f}-{hi:.4f}) | {r['trial_epochs']} "
            f"({r['trial_epochs_vs_random']}x) | {r['wall_s']} ({r['wall_vs_random']}x) |"
        )
    lines.append(f"results in {path}")
    print("\n".join(lines))


def _phase_env() -> dict[str, str]:
    path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="2")


def _run_pair(argv: list[str], trials: int, n: int = 2) -> dict:
    """Control: ``n`` plain sequential searches of trials/n each, side by side, no Beam.

    Each caps TensorFlow's threads as the stage caps its workers (cores / --parallel).
    Their wall time is what any n-way parallel scheme needs on this machine once trials
    slow each other down (shared caches, memory bandwidth, TF's and tf.data's threads);
    sequential_s divided by it is the speedup ceiling the stage is measured against.
    """
    env = _phase_env()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--phase",
                "sequential",
                f"--tag=-pair{i}",
                *argv,
                f"--trials={trials // n}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for i in range(n)
    ]
    walls = []
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"the side-by-side control failed:\n{err[-4000:]}")
        walls.append(json.loads(out.strip().splitlines()[-1])["sequential_s"])
    return {"side_by_side_s": walls, "pair_s": max(walls)}


def _run_phase(phase: str, argv: list[str]) -> dict:
    """Runs one phase in a fresh process; returns its figures plus the machine's load."""
    before, busy = _loadavg(), _busy_cpu_s()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    env = _phase_env()
    proc = subprocess.run(
        [sys.executable, __file__, "--phase", phase, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    wall = time.time() - start
    if proc.returncode:
        raise SystemExit(f"phase {phase} failed:\n{proc.stderr[-4000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime)
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    figures.update(
        loadavg_before=before,
        loadavg_after=_loadavg(),
        process_wall_s=round(wall, 2),
        other_cpu_share_of_one_core=round(max(0.0, _busy_cpu_s() - busy - own) / wall, 2),
    )
    return figures


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train_steps", type=int, default=200)
    parser.add_argument("--eval_steps", type=int, default=5)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--wait_s",
        type=float,
        default=0.0,
        help="trials wait this long instead of training: measures the scheduling alone "
        "(how the stage scales with --parallel when trials do not compete for cores)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=-1,
        help="TF intra-op threads per worker (0: TF's default; default: cores / --parallel, "
        "as the stage does)",
    )
    parser.add_argument(
        "--phase",
        choices=[
            "sequential",
            "stage-rolling",
            "stage-rounds",
            "stage-search_job",
            *(f"es-{v}" for v in EARLY_STOPPING_VARIANTS),
        ],
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--schedules",
        default="rolling,rounds,search_job",
        help="the stage's schedules to run (comma-separated)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each phase, interleaved (sequential, then each schedule, repeated), so "
        "a change in the machine's load hits every phase alike",
    )
    parser.add_argument(
        "--early_stopping",
        action="store_true",
        help="compare plain RandomSearch, RandomSearch with --tuner_early_stopping=asha and "
        "keras-tuner's Hyperband: same space, --trials, --epochs, one run per --seeds seed "
        "(the first of --schedules)",
    )
    parser.add_argument("--epochs", type=int, default=9, help="--early_stopping: per trial")
    parser.add_argument("--seeds", default="1,2,3", help="--early_stopping: one run each")
    parser.add_argument("--asha_reduction_factor", type=int, default=3)
    parser.add_argument("--asha_min_epochs", type=int, default=1)
    parser.add_argument(
        "--objective",
        default="val_sparse_categorical_accuracy",
        choices=tuple(OBJECTIVES),
        help="the search's objective (val_loss: min; the accuracy: max)",
    )
    parser.add_argument("--tag", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    module = os.path.join(OUT, "bench_module.py")
    if args.phase:
        run = os.path.join(OUT, "data", "runs", "data")
        phase = _phase_stage
        if args.phase == "sequential":
            phase = _phase_sequential
        elif args.phase.startswith("es-"):
            phase = _phase_early_stopping
        figures = phase(args, run, module)
        print(json.dumps(figures))
        return

    os.makedirs(OUT, exist_ok=True)
    with open(module, "w") as f:
        f.write(MODULE)
    _make_data(os.path.join(OUT, "data"))
    passthrough = [
        f"--train_steps={args.train_steps}",
        f"--eval_steps={args.eval_steps}",
        f"--trials={args.trials}",
        f"--parallel={args.parallel}",
        f"--seed={args.seed}",
        f"--wait_s={args.wait_s}",
        f"--threads={args.threads}",
        f"--objective={args.objective}",
    ]
    if args.early_stopping:
        passthrough += [
            f"--epochs={args.epochs}",
            f"--asha_reduction_factor={args.asha_reduction_factor}",
            f"--asha_min_epochs={args.asha_min_epochs}",
            f"--schedules={args.schedules}",
        ]
        _early_stopping_comparison(args, passthrough)
        return
    names = [n.strip() for n in args.schedules.split(",") if n.strip()]
    runs: dict[str, list[dict]] = {name: [] for name in ["sequential", *names]}
    pairs = []
    for _ in range(args.repeats):  # interleaved: sequential, pair, then each schedule
        runs["sequential"].append(_run_phase("sequential", passthrough))
        # Waiting trials do not compete for cores: the ceiling is the worker count.
        if not args.wait_s:
            pairs.append(_run_pair(passthrough, args.trials, args.parallel))
        for name in names:
            runs[name].append(_run_phase(f"stage-{name}", passthrough))

    def median(group: list[dict], key: str) -> dict:
        return sorted(group, key=lambda r: r[key])[len(group) // 2]

    sequential = median(runs["sequential"], "sequential_s")
    pair = median(pairs, "pair_s") if pairs else None
    stages = {name: median(runs[name], "stage_s") for name in names}
    seq = sequential["sequential_s"]
    result = {
        "benchmark": "tuner",
        "when": datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
        "cpus": os.cpu_count(),
        "settings": vars(args) | {"phase": None},
        "sequential": sequential,
        "side_by_side": pair,
        "stage": stages,
        "all_runs": runs,
        "all_pairs": pairs,
        "ranges": {
            name: [min(r[k] for r in group), max(r[k] for r in group)]
            for name, group in runs.items()
            for k in (["sequential_s"] if name == "sequential" else ["stage_s"])
        },
        "same_trials": all(
            sequential["learning_rates"] == s["learning_rates"] for s in stages.values()
        ),
        "speedup_ceiling": float(args.parallel) if pair is None else round(seq / pair["pair_s"], 2),
        "trials_per_min": {"sequential": round(60 * args.trials / seq, 1)},
    }
    for name, stage in stages.items():
        par = stage["stage_s"]
        result[f"speedup_warm_{name}"] = round(seq / par, 2)
        result[f"speedup_cold_{name}"] = round(seq / (par + stage["pool_start_s"]), 2)
        result["trials_per_min"][f"{name}_warm"] = round(60 * args.trials / par, 1)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"tuner_{result['when']}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    rate = result["trials_per_min"]
    lines = [
        "",
        "| | wall s | trials/min | speedup | fan-out s/trial | idle s/trial |",
        "|---|---|---|---|---|---|",
        f"| (a) keras_tuner search, sequential | {seq} | {rate['sequential']} | 1.0 | | |",
    ]
    for name in names:
        label = f"stage, {name}"
        stage = stages[name]
        lines.append(
            f"| {label}, {args.parallel} worker(s), warm pool | {stage['stage_s']} | "
            f"{rate[name + '_warm']} | "
            f"{result['speedup_warm_' + name]} | {stage['overhead_per_trial_s']} | "
            f"{stage['idle_per_trial_s']} |"
        )
    lines.append(
        f"\npool start {stages[names[0]]['pool_start_s']} s (once per search); "
        + (
            "two plain searches side by side (no Beam) reach "
            f"{result['speedup_ceiling']}x on this machine; "
            if pair
            else f"waiting trials (--wait_s={args.wait_s}): the ceiling is {args.parallel}x; "
        )
        + f"same trials: {result['same_trials']}; results in {path}"
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
