#!/usr/bin/env bash
# Session 26, call A (issue 29): the dequantizing bf16 tensor-core GEMM for K-quants
# (launch_qgemm_bf16, the runner's default for 9..qgemm_max_m rows): its tests and run_linear's,
# the GEMMs alone on the 8B shapes (integer GEMM, bf16 GEMM by split count, dequantize +
# cuBLASLt, bf16 weights), 8B Q4_K_M kept quantized at 16 / 64 seqs with the bf16 GEMM on and
# off, and at 128 / 256 seqs with qgemm_max_m 256; then session 25's call D (GGUF experts on
# the integer-dot GEMV's expert slots: tests and the Qwen3-30B-A3B A/B).
#   here:  KEEL_DEVCARRY=.devcarry-s26a scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_qgemv_bench keel  (then xz -9)
#   carry: .devcarry-s26a
set -uo pipefail
carry=.devcarry-s26a; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r
stamp "tests: the bf16 GEMM, the integer GEMM, run_linear"
timeout "$(cap 120)" "$B/keel_test_cuda" --gtest_filter='*Qgemm*:QuantLinear.*' >"$r/tests.log" 2>&1
echo "exit $?"
summary "$r/tests.log" 12
grep -B3 -A12 'Failure' "$r/tests.log" | grep -vE '^\s*$' | head -30
grep -E '^qgemm_bf16' "$r/tests.log" | sort -t: -k2 | tail -4
grep -E '^run_linear' "$r/tests.log"

stamp "GEMMs alone, q4_k / q6_k, M = 16 / 32 / 64 / 128"
timeout "$(cap 100)" "$B/cuda_qgemv_bench" --formats q4_k,q6_k --m 16,32,64,128 \
  --kernels gemm,gemm16,deq,bf16 --k-groups 0 --splits 0,1 >"$r/gemm.log" 2>&1; echo "exit $?"
grep -E '^\||^#' "$r/gemm.log"

g=/tmp/q4_k_m.gguf
for on in on off; do
  stamp "8B q4_k_m decode 16 / 64 seqs, --qgemm-bf16 $on"
  timeout "$(cap 150)" "$B/cuda_bench" --model 8b --make-gguf $g --gguf-dtype q4_k_m --keep-quantized on \
    --no-long-prefill --decode-steps 32 --seqs 16,64 --qgemm-bf16 $on >"$r/q4km_$on.log" 2>&1
  echo "exit $?"
  grep -E 'decode|prefill|GEMM' "$r/q4km_$on.log" | head -6
done
stamp "8B q4_k_m decode 128 / 256 seqs, --qgemm-max-m 256 (bf16 GEMM) vs the default 64"
for mm in 256 64; do
  timeout "$(cap 120)" "$B/cuda_bench" --model 8b --weights $g --keep-quantized on \
    --no-long-prefill --decode-steps 32 --seqs 128,256 --qgemm-max-m $mm >"$r/q4km_m$mm.log" 2>&1
  echo "exit $? (max m $mm)"
  grep -E 'decode' "$r/q4km_m$mm.log" | head -4
done

stamp "tests: expert slots, GGUF experts, GGUF MoE models vs the CPU runner"
timeout "$(cap 100)" "$B/keel_test_cuda" --gtest_filter='*Qgemv*:CudaMoeQuant.*:*gguf*' \
  >"$r/tests_moe.log" 2>&1; echo "exit $?"
summary "$r/tests_moe.log" 8
grep -B3 -A12 'Failure' "$r/tests_moe.log" | grep -vE '^\s*$' | head -30
q=/tmp/q3moe.gguf
stamp "make-model qwen3-30b-a3b q4_k_m, 8 layers"
timeout "$(cap 120)" "$B/keel" make-model --shape qwen3-30b-a3b --layers 8 --dtype q4_k_m \
  --format gguf --out $q 2>&1 | tail -1
for on in off on; do
  stamp "qwen3-30b-a3b q4_k_m (8 layers) decode 1 / 4 seqs: --moe-gguf-qgemv $on"
  timeout "$(cap 60)" "$B/cuda_bench" --model qwen3-30b-a3b --weights $q --keep-quantized on \
    --no-long-prefill --decode-steps 32 --seqs 1,4 --moe-gguf-qgemv $on >"$r/q3_$on.log" 2>&1
  echo "exit $?"
  grep -E 'decode' "$r/q3_$on.log" | head -4
done
tar -czf "$out/s26a.tgz" -C "$out" r 2>/dev/null
stamp "done"
