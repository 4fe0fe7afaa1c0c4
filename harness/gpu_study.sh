#!/usr/bin/env bash
# The full vision study on one GPU (harness/recipes/cifar10_fast_study.toml): every vision method alone on the
# airbench-class baseline cifar10_fast, Composer's Mild set together, budgets up to the plateau, 5 seeds; then the
# report (accuracy against cost, speedups at matched accuracy, samples/s, model FLOP/s, % of the GPU's peak, time
# to target).
#
#   bash harness/gpu_study.sh --estimate            # the runs and the GPU time of the whole study; runs nothing
#   bash harness/gpu_study.sh --time-limit 540      # starts runs for about 9 minutes, then stops; rerun to go on
#   bash harness/gpu_study.sh                       # everything not recorded yet
#   bash harness/gpu_study.sh --time-limit 540 --no-report   # a chunk without the report at its end
#   bash harness/gpu_study.sh --data-dir /path/with/cifar10_jpeg.npz
#
# Resumable in chunks: each finished run is appended to method_cards/runs/cifar10_fast_study.jsonl (the folder is
# $CADENCE_RECORDS when set) and logged to $MLFLOW_TRACKING_URI, else cadence_runs/gpu_study.db; a rerun skips the
# runs those records hold. The report covers what is recorded so far: a curve keeps the budgets every seed has
# finished and names the rest. `--estimate` times the study from its own records once they hold GPU runs of the
# baseline on the same card (else give --rate GFLOP/s); it needs no GPU. Other flags go to `cadence-bench grid`.
#
# Mild, as Composer's ResNet "mild" recipe has it (mosaicml/composer composer/yamls/recipes/resnet50_mild.yaml;
# mosaicml/examples examples/benchmarks/resnet_imagenet/main.py): BlurPool, ChannelsLast, EMA (half_life 100ba,
# update_interval 20ba), ProgressiveResizing (initial_scale 0.5, delay_fraction 0.4, finetune_fraction 0.2),
# LabelSmoothing (smoothing 0.08).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
STUDY=${STUDY:-cifar10_fast_study}  # another study's recipe name runs the same way
mkdir -p cadence_runs
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:///$PWD/cadence_runs/gpu_study.db}

report=1 plan=0 args=() records_dir=${CADENCE_RECORDS:-method_cards/runs} previous=
for arg in "$@"; do
  case $arg in
    --no-report) report=0 ;;
    --estimate | --dry-run) plan=1; args+=("$arg") ;;
    --records=*) records_dir=${arg#--records=}; args+=("$arg") ;;
    *) [[ $previous == --records ]] && records_dir=$arg; args+=("$arg") ;;
  esac
  previous=$arg
done
if ((plan)); then  # lists the runs (and with --estimate their FLOPs and GPU time): no GPU needed, nothing runs
  exec "$PY" -m cadence_harness grid "$STUDY" "${args[@]}"
fi

"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'gpu_study.sh needs a CUDA GPU (torch.cuda.is_available() is False); --estimate runs without one')"
"$PY" -c "import torch; print('GPU:', torch.cuda.get_device_name(0), '| torch', torch.__version__, '| CUDA', torch.version.cuda)"

status=0
"$PY" -m cadence_harness grid "$STUDY" "${args[@]}" || status=$?
records=$records_dir/$STUDY.jsonl
if ((report)) && [[ -s $records ]]; then
  "$PY" -m cadence_harness report --study "$STUDY" --records "$records_dir" --out cadence_runs/gpu_study
  echo
  echo "Table: cadence_runs/gpu_study/report.md    Records: $records    Browse: mlflow ui --backend-store-uri $MLFLOW_TRACKING_URI"
fi
exit $status
