#!/usr/bin/env bash
# Issue #19 on the GPU machine: mixture-of-experts layers on CUDA (k_moe*.cu,
# cuda_runner_moe.cpp). The MoE tests (routing vs the CPU top-k on ties, the grouping
# sort, the expert GEMVs vs float64, tiny qwen3_moe / mixtral vs the CPU runner alone and
# batched with 31 others, graphs on, GEMV and GEMM paths; the engine with the prefix cache
# and the GPU sampler), then Qwen3-30B-A3B-shaped bf16
# (random weights made on the device: the 61 GB safetensors file `keel make-model --arch
# qwen3_moe --shape qwen3-30b-a3b` writes does not fit this machine's 64 GiB disk beside
# the rest) batch-1 and 32-sequence decode and prefill 512 / 8192 against the roofline of
# the bytes a step reads at 4.8 TB/s, GEMV and GEMM decode paths; last compute-sanitizer
# memcheck on the MoE kernel tests if time is left. About 90 s.
#
#   there:  bash scripts/device/moecuda_h200.sh [budget-seconds]   (carry .devcarry)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-moecuda}
budget=${1:-100}
source "$(dirname "$0")/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

stamp "MoE tests"
timeout "$(cap 45)" "$B/keel_test_cuda" --gtest_filter='*Moe*' >"$out/tests_moe.log" 2>&1
echo "exit $?"
summary "$out/tests_moe.log" 16
grep -E 'cuda moe' "$out/tests_moe.log"
grep -E -A8 'Failure' "$out/tests_moe.log" | head -40

bench() {  # bench NAME ARGS...: Qwen3-30B-A3B shape, random bf16 weights on the device
  local name=$1
  shift
  stamp "cuda_bench $name"
  timeout "$(cap 45)" "$B/cuda_bench" --model qwen3-30b-a3b --bw 4.8e12 "$@" \
    >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^#|^\||cuda_bench' "$out/bench_$name.log" | head -30
}
# Decode on the gather-GEMVs (graphs) at 1 and 32 sequences, prefill 512 and 8192 on the
# per-expert GEMMs.
bench qwen3_30b --seqs 32 --decode-steps 64
# The GEMM path for decode too (no graphs for MoE steps), for comparison.
bench qwen3_30b_gemm --seqs 32 --decode-steps 32 --no-long-prefill --moe-gemv-max 0

sanitize memcheck 'MoeGroup.*:Shapes/MoeExperts.*:Shapes/MoeRoute.*:Models/CudaMoeVsCpu.*qwen3_moe_mixed' 30
stamp done
