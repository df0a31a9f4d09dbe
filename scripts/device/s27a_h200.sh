#!/usr/bin/env bash
# Session 27, call A (issue 29): the K-quant dequantize a warp a super-block (k_dequant_kquant.cu)
# and the bf16 GEMM with two 16-row tiles a warp at 64 columns (QgemmBf16Params::warp_tiles):
# their tests; the GEMMs and the dequantize alone, before (session 26's binary, *_old) and after;
# 8B Q4_K_M kept quantized decode and prefill before / after (and the integer GEMM's A/B,
# --qgemm-bf16 off); 8B Q4_K_M served at 64 streams kept quantized (after, before) and with
# default flags (bf16).
#   here:  KEEL_DEVCARRY=.devcarry-s27a scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_qgemv_bench keel
#          plus session 26's cuda_bench, cuda_qgemv_bench and keel in bin_old/ (then xz -9)
#   carry: .devcarry-s27a
# (Ran on the tree before the two GEMM variants were taken out: QgemmBf16Params::warp_tiles and
# cuda_qgemv_bench --warp-tiles are gone since, see bench/RESULTS.md, session 27.)
set -uo pipefail
carry=.devcarry-s27a; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r
stamp "tests: dequantize, the bf16 GEMM, run_linear, GGUF experts and models"
timeout "$(cap 150)" "$B/keel_test_cuda" \
  --gtest_filter='Formats/QuantWeights.*:*QgemmBf16*:QuantLinear.*:CudaMoeQuant.*:*Gguf*:*gguf*' \
  >"$r/tests.log" 2>&1
echo "exit $?"
summary "$r/tests.log" 8
grep -B3 -A12 'Failure' "$r/tests.log" | grep -vE '^\s*$' | head -30

stamp "GEMMs and dequantize alone, q4_k / q6_k: before"
timeout "$(cap 60)" "$carry/bin_old/cuda_qgemv_bench" --formats q4_k,q6_k --m 16,32,64,128 \
  --kernels gemm16,deq,bf16 --splits 0 >"$r/qb_old.log" 2>&1; echo "exit $?"
stamp "after (warp tiles 1, 2)"
timeout "$(cap 60)" "$B/cuda_qgemv_bench" --formats q4_k,q6_k --m 16,32,64,128 \
  --kernels dq,gemm16,deq --splits 0 --warp-tiles 1,2 >"$r/qb_new.log" 2>&1; echo "exit $?"
grep -E '^#' "$r/qb_new.log"
grep -E '^\|' "$r/qb_old.log" | head -60
grep -E '^\|' "$r/qb_new.log" | head -80

g=/tmp/q4_k_m.gguf
for v in new old; do
  b=$B/cuda_bench; [ $v = old ] && b=$carry/bin_old/cuda_bench
  stamp "8B q4_k_m kept quantized, decode 1 / 16 / 64 seqs, prefill ($v)"
  timeout "$(cap 150)" "$b" --model 8b --make-gguf $g --gguf-dtype q4_k_m --keep-quantized on \
    --no-long-prefill --decode-steps 32 --seqs 1,16,64 >"$r/q4km_$v.log" 2>&1
  echo "exit $?"
  grep -E 'decode|prefill' "$r/q4km_$v.log" | head -8
done

serve_one q4km_quantized_64 64 $g KEEL_QUANTIZED_WEIGHTS=on
B0=$B; B=$carry/bin_old; serve_one q4km_quantized_64_old 64 $g KEEL_QUANTIZED_WEIGHTS=on; B=$B0
serve_one q4km_default_64 64 $g KEEL_UNUSED=1

stamp "8B q4_k_m decode 16 / 64 seqs: --qgemm-bf16 off (the integer GEMM)"
timeout "$(cap 90)" "$B/cuda_bench" --model 8b --make-gguf $g --gguf-dtype q4_k_m --keep-quantized on \
  --no-long-prefill --decode-steps 32 --seqs 16,64 --qgemm-bf16 off >"$r/q4km_int.log" 2>&1
echo "exit $?"
grep -E 'decode' "$r/q4km_int.log" | head -4
tar -czf "$out/s27a.tgz" -C "$out" r 2>/dev/null
stamp "done"
