#!/usr/bin/env bash
# Session 25, call D (issue 29): GGUF routed experts on the integer-dot GEMV's expert slots
# (QgemvParams::expert_ids) in place of the float slot GEMV: the tests (expert slots equal
# the per-expert GEMV bit for bit; the GGUF MoE models against the CPU runner), then a
# Qwen3-30B-A3B-shaped Q4_K_M GGUF of 8 layers decoded at 1 / 4 seqs, kept quantized, with
# the expert slots on (`--moe-gguf-qgemv on`) and off (the float slot GEMV, the default).
#   here:  KEEL_DEVCARRY=.devcarry-s25d scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_qgemv_bench keel
#          (pack with xz -9: the binaries share most of their bytes; -6 gave 57 MB, -9e 29 MB)
# Last, Q4_K on the streamed GEMV against the register kernel (session 25 measured it slower on
# an H100; on an H200, which needs more bytes in flight, it may not be).
#   carry: .devcarry-s25d
set -uo pipefail
carry=.devcarry-s25d; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r
stamp "tests: qgemv (expert slots), GGUF experts, GGUF MoE models vs the CPU runner"
timeout "$(cap 100)" "$B/keel_test_cuda" --gtest_filter='*Qgemv*:CudaMoeQuant.*:*gguf*' \
  >"$r/tests.log" 2>&1; echo "exit $?"
summary "$r/tests.log" 10
grep -B3 -A12 'Failure' "$r/tests.log" | grep -vE '^\s*$' | head -40
g=/tmp/q3moe.gguf
stamp "make-model qwen3-30b-a3b q4_k_m, 8 layers"
timeout "$(cap 120)" "$B/keel" make-model --arch qwen3_moe --shape qwen3-30b-a3b --layers 8 --dtype q4_k_m \
  --format gguf --out $g 2>&1 | tail -1
for i in 1 2; do
  for on in off on; do
    stamp "qwen3-30b-a3b q4_k_m (8 layers) decode 1 / 4 seqs: --moe-gguf-qgemv $on"
    timeout "$(cap 60)" "$B/cuda_bench" --model qwen3-30b-a3b --weights $g --keep-quantized on \
      --no-long-prefill --decode-steps 32 --seqs 1,4 --moe-gguf-qgemv $on >"$r/q3_${on}_$i.log" 2>&1
    echo "exit $?"
    grep -E 'decode' "$r/q3_${on}_$i.log" | head -4
  done
done
stamp "k_qgemv alone, q4_k M = 1 / 2: register vs streamed (2 / 3 slots)"
timeout "$(cap 60)" "$B/cuda_qgemv_bench" --formats q4_k --m 1,2 --waves 0 --kernels dp4a,dp4s \
  --stages 2,3 >"$r/qgemv_q4k.log" 2>&1; echo "exit $?"
grep -E '^\||^#' "$r/qgemv_q4k.log"
tar -czf "$out/s25d.tgz" -C "$out" r 2>/dev/null
stamp "done"
