#!/usr/bin/env bash
# Issue 27, item 7, on one GPU machine start: can the training time of one configuration's seeds be decided with
# (coefficient of variation <= 3 %)? One short script for a lent machine: 4 min 15 s on an H200 with SEEDS=10
# (2026-11-28, before steps 2b and 3a existed, which add about 1.5 min; harness/measurements/2026-11-28-h200-timing.md):
#
#   1. the harness's host time per step on the GPU (the 200 us goal), beside a hand-written loop;
#   2. cifar10_fast's baseline, SEEDS seeds in one process (one unrecorded warm-up run first), eager;
#  2b. the same seeds at batch BIG_BATCH (default 2048; 0 skips): half the steps for the same device work per
#      sample, so if the host sets the pace (2026-11-28: training time followed the training thread's CPU time,
#      r = 0.99) training time falls and its spread with it; if the device does, neither moves much;
#  3a. one compiled epoch with torch's graph-break, recompile and CUDA-graph logs (perf_hints says when CUDA
#      graphs were skipped, e.g. for mutated inputs): on 2026-11-28 the compiled runs computed the eager runs'
#      accuracies to the last digit because torch 2.11 never compiled them (the FLOP-counted first step ran
#      the forward under a dispatch mode; fixed since, see the measurement note's section 6);
#   3. the same seeds with the forward and loss compiled (torch.compile, mode "reduce-overhead": CUDA graphs, so
#      the host launches a step's kernels in one call and a slower host start matters less); skip with COMPILE=0;
#   (run in the order 1, 2, 3a, 3, 2b: on a short lease the compiled seeds matter more than the larger batch)
#   4. `cadence-bench spread`: each configuration's CV with its 95 % interval, the goal's verdict, what a compiled
#      configuration's runs compiled (graphs, graph breaks, CUDA-graph skips; NOTHING WAS COMPILED if so), the evaluation
#      time's CV and the correlation of training time with the training thread's CPU time across the seeds (and
#      from them the likely cause: host speed or device), and what the slowest run was doing (training-thread CPU
#      s per training s, gc s in training, host load, CPU share stolen by the hypervisor, lowest SM clock).
#
#   bash harness/device_copy.sh trim                            # here, before the device call (64 MiB copy limit)
#   bash harness/gpu_timing.sh --data-dir .gpu                  # there, from the repository root, after the set-up
#   SEEDS=5 COMPILE=0 bash harness/gpu_timing.sh --data-dir .gpu
#   PHASE_S=200 bash harness/gpu_timing.sh --data-dir .gpu      # each phase killed after 200 s (a short lease)
#
# Records go to $OUT/records (default cadence_runs/gpu_timing/records): copy them into method_cards/runs to keep
# them. Every run records the machine start's boot_id, so runs of later starts are told apart.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python}
SEEDS=${SEEDS:-10}
COMPILE=${COMPILE:-1}
BIG_BATCH=${BIG_BATCH:-2048}
OUT=${OUT:-cadence_runs/gpu_timing}
mkdir -p "$OUT"
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:///$PWD/$OUT/timing.db}
# A phase cut off by PHASE_S keeps the records of the runs it finished; the next phase still runs.
bounded() { if [[ -n ${PHASE_S:-} ]]; then timeout --signal=TERM --kill-after=10 "$PHASE_S" "$@"; else "$@"; fi; }
common=(--in-process --seeds "$SEEDS" --records "$OUT/records" --log-dir "$OUT/logs" "$@")

"$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 'gpu_timing.sh needs a CUDA GPU (torch.cuda.is_available() is False)')"
"$PY" -c "import torch; print('GPU:', torch.cuda.get_device_name(0), '| torch', torch.__version__, '| CUDA', torch.version.cuda)"
cat /proc/sys/kernel/random/boot_id

echo "== 1. host time per step (harness_step, GPU)"
bounded "$PY" -m cadence_harness.benchmarks.harness_step --device gpu --repeats 5 || echo "harness_step failed: $?"
echo "== 2. cifar10_fast baseline, $SEEDS seeds, eager"
bounded "$PY" -m cadence_harness grid cifar10_fast "${common[@]}" || echo "eager grid failed: $?"
if ((COMPILE)); then
  echo "== 3a. is the compiled step used? (torch's logs of one compiled epoch: $OUT/compile_check.log)"
  TORCH_LOGS="graph_breaks,recompiles,perf_hints" bounded "$PY" -m cadence_harness run cifar10_fast \
    --set compile=reduce-overhead --duration 1ep --seeds 1 --no-progress "$@" > "$OUT/compile_check.log" 2>&1 \
    || echo "compile check failed: $?"
  grep -iE "graph break|recompil|cudagraph" "$OUT/compile_check.log" | sort | uniq -c | sort -rn | head -12 || true
  echo "== 3. the same, compiled (reduce-overhead)"
  bounded "$PY" -m cadence_harness grid cifar10_fast --set compile=reduce-overhead "${common[@]}" || echo "compiled grid failed: $?"
fi
if ((BIG_BATCH)); then
  echo "== 2b. the same at batch $BIG_BATCH (half the host's work per sample)"
  bounded "$PY" -m cadence_harness grid cifar10_fast --batch-size "$BIG_BATCH" "${common[@]}" || echo "batch grid failed: $?"
fi
echo "== 4. spread"
"$PY" -m cadence_harness spread cifar10_fast --records "$OUT/records"
