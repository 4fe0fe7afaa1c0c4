#!/usr/bin/env bash
# CIFAR-10 time-to-90% on one GPU (the JPEG re-encoded data here does not reach 94%): the baseline and the best recipe (harness/recipes/cifar10_resnet18_gpu.toml),
# 3 seeds each, logged to MLflow, then the table with 95% confidence intervals and the plots.
#
#   bash harness/gpu_bench.sh                                # from the repository root, after `make install`
#   bash harness/gpu_bench.sh --seeds 5                      # more seeds
#   bash harness/gpu_bench.sh --combination label_smoothing+progressive_resizing+cutout   # another "best" arm
#   bash harness/gpu_bench.sh --data-dir /path/with/cifar10_jpeg.npz
#
# Runs go to $MLFLOW_TRACKING_URI, else to gpu_bench.db here; rerunning skips the runs already finished.
# Time: about 3-4 minutes per run on an H100 (30 epochs of ResNet-18), so about 25 minutes for 2 arms x 3 seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:///$PWD/gpu_bench.db}

"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'gpu_bench.sh needs a CUDA GPU (torch.cuda.is_available() is False)')"
"$PY" -c "import torch; print('GPU:', torch.cuda.get_device_name(0), '| torch', torch.__version__, '| CUDA', torch.version.cuda)"

"$PY" -m cadence_harness grid cifar10_resnet18_gpu --device gpu "$@"
"$PY" -m cadence_harness report --experiment cifar10_resnet18_gpu --out cadence_runs/gpu_bench
echo
echo "Table: cadence_runs/gpu_bench/report.md    Browse: mlflow ui --backend-store-uri $MLFLOW_TRACKING_URI"
