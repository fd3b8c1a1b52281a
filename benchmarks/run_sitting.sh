#!/usr/bin/env bash
# One benchmark sitting: for each row count, the TFX 1.16 anchor and this repo's pipeline
# on the same taxi data, back to back, then this repo's pipeline on the generated dataset;
# finally the markdown tables of everything this sitting measured.
#
#   bash benchmarks/run_sitting.sh                      # SIZES="100000 1000000"
#   SIZES="20000" bash benchmarks/run_sitting.sh        # a quick check of the harness
#   SKIP_TFX=1 MODES="in_memory" bash benchmarks/run_sitting.sh
#
# Environment:
#   SIZES       row counts (default "100000 1000000")
#   MODES       our DirectRunner modes: in_memory and/or multi_processing (both by default;
#               multi_processing uses one worker per core, like the anchor)
#   SKIP_TFX=1  only our pipeline
#   SKIP_SYNTH=1  skip the generated dataset
#   PYTHON      this repo's interpreter (default .venv/bin/python)
# Results: benchmarks/results/*.json (committed); data, logs and artifacts under
# benchmarks/out/ (ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
SIZES=${SIZES:-"100000 1000000"}
MODES=${MODES:-"in_memory multi_processing"}
SINCE=$(date +%Y%m%d-%H%M%S)
FAILED=""
# A failed run is noted (its JSON goes to benchmarks/out/failed/) and the sitting goes on.
run() { "$@" || FAILED="$FAILED\n  ${*@Q}"; }

beam_args() {
  case "$1" in
    in_memory) echo "--direct_running_mode=in_memory" ;;
    multi_processing) echo "--direct_running_mode=multi_processing --direct_num_workers=0" ;;
    *) echo "unknown mode $1" >&2; exit 2 ;;
  esac
}

echo "== sitting $SINCE on $(hostname), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
$PY benchmarks/taxi.py port --out benchmarks/out/taxi_module_ported.py
for n in $SIZES; do
  taxi_csv=$($PY benchmarks/taxi.py data "$n")
  taxi_dir=$(dirname "$taxi_csv")
  synth_csv=benchmarks/out/data/synth_$n.csv
  if [ -z "${SKIP_SYNTH:-}" ] && [ ! -f "$synth_csv" ]; then
    $PY benchmarks/make_dataset.py "$n" "$synth_csv" --seed 0
  fi
  if [ -z "${SKIP_TFX:-}" ]; then
    echo "== TFX anchor, taxi $n rows; load: $(cut -d' ' -f1-3 /proc/loadavg)"
    run $PY benchmarks/run_tfx.py --data "$taxi_dir"
  fi
  for mode in $MODES; do
    echo "== ours ($mode), taxi $n rows; load: $(cut -d' ' -f1-3 /proc/loadavg)"
    # --no_infer_feature_shape: the anchor's SchemaGen runs with infer_feature_shape=False
    # for the taxi module, whose preprocessing_fn expects SparseTensors. --ignore_anomalies:
    # TFX's ExampleValidator reports anomalies and Transform runs anyway; ours stops on
    # blocking ones (the scaled taxi data's eval split has company names train lacks).
    run $PY benchmarks/bench_data_stages.py --data "$taxi_csv" --module_file benchmarks/out/taxi_module_ported.py \
      --cli_args="--no_infer_feature_shape --ignore_anomalies" --beam_args="$(beam_args "$mode")"
    if [ -z "${SKIP_SYNTH:-}" ]; then
      echo "== ours ($mode), synth $n rows; load: $(cut -d' ' -f1-3 /proc/loadavg)"
      run $PY benchmarks/bench_data_stages.py --data "$synth_csv" --module_file benchmarks/synth_module.py \
        --beam_args="$(beam_args "$mode")"
    fi
  done
done
echo "== done; load: $(cut -d' ' -f1-3 /proc/loadavg)"
$PY benchmarks/compare.py --since "$SINCE"
if [ -n "$FAILED" ]; then
  printf "FAILED:%b\n" "$FAILED" >&2
  exit 1
fi
