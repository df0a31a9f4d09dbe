#!/usr/bin/env bash
# Session 16, fourth device call: 8B decode at 2 seqs on the fused path's tensor-core GEMV
# (slower in the model than alone) with PDL off, graphs off, 4 waves, against the CUDA-core
# kernel, to find which of them costs the 2.4 ms a step.
set -uo pipefail
carry=.devcarry-s16; out=${OUT:-/tmp/o}; budget=${BUDGET:-300}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
run() {  # name, extra flags
  timeout "$(cap 40)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 64 --seqs 2,4 $2 >"$out/$1.log" 2>&1
  echo "$1 ($2): $(grep -E '^\| 8b +\| decode [0-9]+ seq' "$out/$1.log" | awk -F'|' '{printf "%s %s /", $3, $4}')"
}
run mma "--fused-max-m 4"
run core "--fused-max-m 4 --fused-mma 0"
run mma_nopdl "--fused-max-m 4 --pdl off"
run core_nopdl "--fused-max-m 4 --fused-mma 0 --pdl off"
run mma_nograph "--fused-max-m 4 --no-graphs"
run core_nograph "--fused-max-m 4 --fused-mma 0 --no-graphs"
run mma_w4 "--fused-max-m 4 --fused-waves 4"
run mma_w8 "--fused-max-m 4 --fused-waves 8"
stamp done
