#!/usr/bin/env bash
# Session 28, call A (issue 29): MXFP4 experts' grouped GEMM with the weights as the MMA's A
# operand, decoded into fragments in registers (k_moe_grouped_mxfp4.cu), against the first
# low-bit kernel's decoded bf16 tiles + WMMA (`--moe-mxfp4-mma off`, same binary). Its tests
# and the MoE model tests; gpt-oss-20b decode 1 / 64 / 256 seqs and prefill, new and old; 1 / 8
# seqs with every MoE step on the grouped GEMM; profiled at 64 and 1; gpt-oss-20b served at 64 /
# 256 streams (default flags: the new kernel); then session 27's untested bf16-GEMM items.
#   here:  KEEL_DEVCARRY=.devcarry-s28a scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_qgemv_bench keel   (then xz -9)
#   carry: .devcarry-s28a
# (`--moe-mxfp4-mma` went with the first kernel's MXFP4 path in 19d2855: this script ran
# binaries of a112aa4, which still had it.)
set -uo pipefail
carry=.devcarry-s28a; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r
stamp "tests: the low-bit grouped GEMMs, the MoE models, the bf16 GEMM and dequantize"
timeout "$(cap 170)" "$B/keel_test_cuda" --gtest_filter='MoeGroupedLowbit*:*CudaMoeLowbitGemm*:*MoeGrouped*:*Mxfp4*:*MXFP4*:*mxfp4*:*gpt_oss*:*GptOss*:*Qgemm*:QuantLinear.*:Formats/QuantWeights.*:CudaMoeQuant.*' \
  >"$r/tests.log" 2>&1
echo "exit $?"
summary "$r/tests.log" 8
grep -E '^lowbit .*MXFP4.*(spread|tile_plus)' "$r/tests.log" | head -8
grep -B3 -A10 'Failure' "$r/tests.log" | grep -vE '^\s*$' | head -30

for v in on off; do
  stamp "gpt-oss-20b decode 1 / 64 / 256 seqs, prefill (--moe-mxfp4-mma $v)"
  timeout "$(cap 110)" "$B/cuda_bench" --model gpt-oss-20b --no-long-prefill --decode-steps 32 \
    --seqs 1,64,256 --moe-mxfp4-mma $v >"$r/goss_$v.log" 2>&1
  echo "exit $?"
  grep -E 'decode|prefill' "$r/goss_$v.log" | head -8
done
stamp "gpt-oss-20b decode 1 / 8 seqs with every MoE step on the grouped GEMM (new)"
timeout "$(cap 60)" "$B/cuda_bench" --model gpt-oss-20b --no-long-prefill --decode-steps 32 \
  --seqs 1,8 --moe-lowbit-gemv-max 0 >"$r/goss_gemm_small.log" 2>&1
echo "exit $?"
grep -E 'decode' "$r/goss_gemm_small.log" | head -4
stamp "gpt-oss-20b 64 seqs profiled (new)"
timeout "$(cap 60)" "$B/cuda_bench" --model gpt-oss-20b --no-long-prefill --decode-steps 8 \
  --seqs 64 --profile >"$r/goss_prof.log" 2>&1
echo "exit $?"
grep -vE '^#|^\|--' "$r/goss_prof.log" | tail -10
timeout "$(cap 40)" "$B/cuda_bench" --model gpt-oss-20b --no-long-prefill --decode-steps 8 \
  --seqs 1 --profile >"$r/goss_prof1.log" 2>&1
echo "exit $?"
grep -vE '^#|^\|--' "$r/goss_prof1.log" | tail -10

m=/tmp/s28/gpt-oss-20b
stamp "make-model gpt-oss-20b (MXFP4 experts)"
timeout "$(cap 70)" "$B/keel" make-model --arch gpt_oss --shape gpt-oss-20b --dtype mxfp4 \
  --out "$m" 2>&1 | tail -1
serve_one goss_64 64 $m KEEL_UNUSED=1
serve_one goss_256 256 $m KEEL_UNUSED=1

stamp "session 27 call C: the bf16 GEMM, q4_k / q5_k, M = 16 / 64"
timeout "$(cap 40)" "$B/cuda_qgemv_bench" --formats q4_k,q5_k --m 16,64 --kernels gemm16 2>&1 |
  grep -E '^\|' | grep -vE '\-\-\-|fmt'
tar -czf "$out/s28a.tgz" -C "$out" r 2>/dev/null
stamp "done"
