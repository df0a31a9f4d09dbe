#!/usr/bin/env bash
# Session 27, call B (issue 29), the tree to land: Q4_K / Q5_K dequantized a warp a super-block
# (k_dequant_kquant.cu; Q6_K kept on the chunk kernel), the integer GEMM's K-quant paths deleted
# (the bf16 GEMM's changes of call A reverted: they lost), the bf16 GEMM's Q4_K / Q5_K scales
# decoded once a block into a table. The whole CUDA suite; the dequantize alone and with
# cuBLASLt, and the bf16 GEMM, after and before; 8B Q4_K_M and Qwen3-30B-A3B
# Q4_K_M (8 layers) decode and prefill after / before; 8B Q4_K_M served at 16 and 64 streams
# kept quantized (after, before at 64) and with default flags (bf16).
#   here:  KEEL_DEVCARRY=.devcarry-s27b scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_qgemv_bench keel
#          plus session 26's cuda_bench, cuda_qgemv_bench and keel in bin_old/ (then xz -9)
#   carry: .devcarry-s27b
set -uo pipefail
carry=.devcarry-s27b; out=${OUT:-/tmp/o}; budget=${BUDGET:-560}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r
O=$carry/bin_old
stamp "the whole CUDA suite"
timeout "$(cap 300)" "$B/keel_test_cuda" >"$r/tests_all.log" 2>&1
echo "exit $?"
summary "$r/tests_all.log" 12
grep -B3 -A10 'Failure' "$r/tests_all.log" | grep -vE '^\s*$' | head -30

stamp "dequantize alone and + cuBLASLt; the bf16 GEMM at M = 16 / 32 / 64: after, before"
timeout "$(cap 60)" "$B/cuda_qgemv_bench" --formats q4_k,q5_k,q6_k --m 16,32,64 \
  --kernels dq,deq,gemm16,bf16 >"$r/dq_new.log" 2>&1; echo "exit $?"
timeout "$(cap 50)" "$O/cuda_qgemv_bench" --formats q4_k,q5_k,q6_k --m 16,32,64 \
  --kernels deq,gemm16 >"$r/dq_old.log" 2>&1
echo "exit $?"
grep -E '^\|' "$r/dq_new.log" "$r/dq_old.log" | grep -vE '\-\-\-|fmt' | grep -E ' 16 \|| 64 \|'

g=/tmp/q4_k_m.gguf
for v in new old; do
  b=$B; [ $v = old ] && b=$O
  stamp "8B q4_k_m kept quantized, decode 1 / 16 / 64 seqs, prefill ($v)"
  timeout "$(cap 150)" "$b/cuda_bench" --model 8b --make-gguf $g --gguf-dtype q4_k_m \
    --keep-quantized on --no-long-prefill --decode-steps 32 --seqs 1,16,64 >"$r/q4km_$v.log" 2>&1
  echo "exit $?"
  grep -E 'decode|prefill' "$r/q4km_$v.log" | head -8
done

q=/tmp/q3moe.gguf
timeout "$(cap 120)" "$B/keel" make-model --arch qwen3_moe --shape qwen3-30b-a3b --layers 8 \
  --dtype q4_k_m --format gguf --out $q 2>&1 | tail -1
for v in new old; do
  b=$B; [ $v = old ] && b=$O
  stamp "qwen3-30b-a3b q4_k_m (8 layers) decode 1 / 16 seqs, prefill ($v)"
  timeout "$(cap 60)" "$b/cuda_bench" --model qwen3-30b-a3b --weights $q --keep-quantized on \
    --no-long-prefill --decode-steps 32 --seqs 1,16 >"$r/q3_$v.log" 2>&1
  echo "exit $?"
  grep -E 'decode|prefill' "$r/q3_$v.log" | head -6
done

serve_one q4km_quantized_64 64 $g KEEL_QUANTIZED_WEIGHTS=on
serve_one q4km_default_64 64 $g KEEL_UNUSED=1
B0=$B; B=$O; serve_one q4km_quantized_64_old 64 $g KEEL_QUANTIZED_WEIGHTS=on; B=$B0
serve_one q4km_quantized_16 16 $g KEEL_QUANTIZED_WEIGHTS=on
serve_one q4km_default_16 16 $g KEEL_UNUSED=1
tar -czf "$out/s27b.tgz" -C "$out" r 2>/dev/null
stamp "done"
