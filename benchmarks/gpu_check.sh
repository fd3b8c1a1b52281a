#!/usr/bin/env bash
# The GPU check of this project, one command from the repo root (about 5 minutes on a
# 16-core H100 machine):
#
#   bash benchmarks/gpu_check.sh
#
# On the offline GPU machine of ../shared/device-kit (README there), after its parts are
# set up: this script sources .devkit/scripts/env.sh itself when it is there, and puts
# the wheels of GPU_CHECK_WHEELS (default .devkit/extra: the packages the kit lacks,
# SQLAlchemy, Alembic, Mako, Jinja2, pytest, pluggy, iniconfig, isal; e.g. `pip download
# --no-deps --only-binary=:all: --python-version 3.12 -d .devkit/extra isal==1.9.1`) on
# the path.
#
# It prints, and writes under $OUT (else ./gpu_check_out):
#   1. each process's GPU memory through the bundled run with tuning (nvidia-smi's
#      compute apps every second, pids mapped to the run's process kinds; the launcher
#      must stay under 1 GB): bundled_run.gpu.jsonl(.summary.json), bundled_run.log;
#   2. the compute-bound trainer benchmark (benchmarks/bench_trainer.py: examples/s of
#      the input path, of fit on cached batches and on the runner's input, of a
#      hand-written XLA loop on cached batches (the ceiling), mean GPU utilization of
#      each phase), float32 and mixed precision: bench_*.json;
#   3. the 2-logical-GPU MirroredStrategy test's result: logical_gpus.log.
# Without nvidia-smi (a CPU machine: a dry run) it says so and runs everything at small
# sizes, GPU figures left empty.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUTDIR=${OUT:-$ROOT/gpu_check_out}
mkdir -p "$OUTDIR"
exec > >(tee -a "$OUTDIR/gpu_check.log") 2>&1
START=$(date +%s)
say() { echo "[gpu_check $(( $(date +%s) - START ))s] $*"; }

if [ -f .devkit/scripts/env.sh ]; then . .devkit/scripts/env.sh; fi
PY=${PYTHON:-python3}
EXTRA=/tmp/gpu_check_extra
WHEELS=${GPU_CHECK_WHEELS:-$ROOT/.devkit/extra}
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  rm -rf "$EXTRA"; mkdir -p "$EXTRA"
  for w in "$WHEELS"/*.whl; do "$PY" -m zipfile -e "$w" "$EXTRA"; done
  export PYTHONPATH=$EXTRA${PYTHONPATH:+:$PYTHONPATH}
  say "extra wheels from $WHEELS: $(cd "$WHEELS" && ls *.whl | tr '\n' ' ')"
fi
if [ -n "${GPU_CHECK_EXTRA_SITE:-}" ]; then  # an unpacked folder of the same (dry runs)
  export PYTHONPATH=$GPU_CHECK_EXTRA_SITE${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
# XLA (Keras 3 jit-compiles on GPU) needs ptxas and libdevice: the kit's nvidia-cuda-nvcc.
for d in /tmp/site/nvidia/cuda_nvcc; do
  if [ -d "$d/bin" ]; then
    export PATH=$d/bin:$PATH
    export XLA_FLAGS=${XLA_FLAGS:---xla_gpu_cuda_data_dir=$d}
  fi
done
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}

missing=$("$PY" - <<'PY'
import importlib.util
need = ["tensorflow", "apache_beam", "tensorflow_transform", "keras_tuner", "sqlalchemy",
        "alembic", "mako", "jinja2", "pytest", "isal"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
PY
)
if [ -n "$missing" ]; then
  say "missing Python packages: $missing (add their wheels to $WHEELS); stopping"
  exit 2
fi

if command -v nvidia-smi >/dev/null; then
  GPU=1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
    | sed 's/^/GPU: /'
  ROWS=150000; STEPS=1000; WARMUP=50; BATCHES=300; RUN_STEPS=500; SLOW=1
else
  GPU=0
  say "nvidia-smi not found: no GPU here, GPU memory and utilization are not measured (dry run at small sizes)"
  ROWS=20000; STEPS=4; WARMUP=2; BATCHES=20; RUN_STEPS=4; SLOW=4  # a small CPU machine
fi
"$PY" -c "import tensorflow as tf; print('TensorFlow', tf.__version__, 'GPUs:', tf.config.list_physical_devices('GPU'))"
WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
CORES=$(nproc)

# 1. The bundled run with tuning, its processes' GPU memory sampled every second. The
#    benchmark's data stages run meanwhile on the CPU (CUDA hidden from them).
say "1. bundled run with tuning (Evaluator and InfraValidator off: TFMA and TF Serving's"
say "   protos are not in the kit), GPU memory per process sampled every second"
"$PY" benchmarks/bench_trainer.py --prepare_only --rows "$ROWS" --work "$WORK/bench" \
  --beam_arg=--direct_running_mode=multi_processing --beam_arg=--direct_num_workers=$(( CORES / 2 > 1 ? CORES / 2 : 1 )) \
  > "$OUTDIR/bench_prepare.log" 2>&1 &
PREPARE=$!
timeout $(( 150 * SLOW )) "$PY" -m beam_pipeline --pipeline_root="$WORK/bundled" --run_id=gpu_check \
  --no_evaluator --no_infra_validator --no_progress > "$OUTDIR/bundled_run.log" 2>&1 &
LAUNCHER=$!
"$PY" benchmarks/gpu_watch.py --pid "$LAUNCHER" --out "$OUTDIR/bundled_run.gpu.jsonl"
wait "$LAUNCHER"; rc=$?
say "bundled run exit code $rc (log: bundled_run.log); its last lines:"
tail -n 12 "$OUTDIR/bundled_run.log"

# 2. The compute-bound benchmark: float32, then mixed precision.
wait "$PREPARE" || { say "benchmark data preparation failed:"; tail -n 20 "$OUTDIR/bench_prepare.log"; }
for mode in float32 mixed; do
  flag=""; [ "$mode" = mixed ] && flag="--mixed_precision"
  say "2. compute-bound trainer benchmark ($mode): 4 Dense(2048), batch 1024"
  timeout $(( 120 * SLOW )) "$PY" benchmarks/bench_trainer.py $flag --work "$WORK/bench" --out "$OUTDIR" \
    --steps "$STEPS" --warmup "$WARMUP" --input_batches "$BATCHES" --run_steps "$RUN_STEPS" \
    --note "gpu_check.sh $mode" > "$OUTDIR/bench_$mode.log" 2>&1
  say "benchmark exit code $? (log: bench_$mode.log)"
  "$PY" - "$OUTDIR" "$mode" <<'PY'
import glob, json, os, sys
out, mode = sys.argv[1], sys.argv[2]
files = sorted(glob.glob(os.path.join(out, "trainer_*.json")), key=os.path.getmtime)
if not files:
    sys.exit(print("  no result"))
r = json.load(open(files[-1]))
os.rename(files[-1], os.path.join(out, f"bench_{mode}.json"))
print(f"  device {r['device']['gpus'] or r['device']['devices']}, policy {r['policy']}, "
      f"steps_per_execution {r['steps_per_execution']}")
for k, v in r["examples_per_s"].items():
    u = r["gpu_utilization_pct"].get(k)
    print(f"  {k:<32} {v:>12,} examples/s" + (f"   GPU busy {u}%" if u is not None else ""))
print(f"  input / fit_cached = {r['input_over_fit_cached']}x; fit / fit_cached = "
      f"{r['fit_over_fit_cached']}; fit / handwritten_xla = {r['fit_over_handwritten_xla']}; "
      f"ms/step {r['timings']}")
PY
done

# 3. MirroredStrategy over 2 logical GPUs split from one.
say "3. 2-logical-GPU MirroredStrategy test"
# pytest's own process builds the penguin data with TensorFlow (not through the launcher,
# which would set memory growth): without it, it would hold the GPU the test splits.
TF_FORCE_GPU_ALLOW_GROWTH=true timeout $(( 150 * SLOW )) "$PY" -m pytest -o addopts="" -p no:cacheprovider -q -rs \
  tests/test_trainer_distributed.py -k two_logical_gpus > "$OUTDIR/logical_gpus.log" 2>&1
say "2-logical-GPU test exit code $? (0: passed; 5: none ran); its summary:"
tail -n 6 "$OUTDIR/logical_gpus.log"

rm -rf "$WORK"
say "done; outputs in $OUTDIR: $(cd "$OUTDIR" && ls | tr '\n' ' ')"
