#!/usr/bin/env bash
# Session 25, call C (issue 29): MXFP4 decoded straight to bf16 pairs (byte permutes and a
# bf16x2 multiply, mxfp4::decode_block_bf16) in the experts' low-bit grouped GEMM and the
# bf16 dequantize: the MXFP4 tests (bit-exact dequantize against the CPU, the grouped GEMM
# against its host reference, the MoE models against the CPU runner), then gpt-oss-20b
# decode 1 / 64 / 256 seqs against the binary before the change (cuda_bench_old, 4646979).
#   here:  KEEL_DEVCARRY=.devcarry-s25c scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench   (+ cuda_bench_old: the build before)
#   carry: .devcarry-s25c
set -uo pipefail
carry=.devcarry-s25c; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r
stamp "tests: MXFP4 dequantize, the low-bit grouped GEMM, MXFP4 MoE models vs the CPU runner"
timeout "$(cap 120)" "$B/keel_test_cuda" --gtest_filter='*Mxfp4*:*MoeGroupedLowbit*:*mxfp4*' \
  >"$r/tests.log" 2>&1; echo "exit $?"
summary "$r/tests.log" 10
grep -B3 -A12 'Failure' "$r/tests.log" | grep -vE '^\s*$' | head -40
for bin in cuda_bench_old cuda_bench cuda_bench_old cuda_bench; do
  stamp "gpt-oss-20b decode 1 / 64 / 256 seqs: $bin"
  timeout "$(cap 120)" "$B/$bin" --model gpt-oss-20b --no-long-prefill --decode-steps 32 \
    --seqs 1,64,256 >"$r/oss_$bin.log" 2>&1; echo "exit $?"
  grep -E 'decode|prefill' "$r/oss_$bin.log" | head -6
done
tar -czf "$out/s25c.tgz" -C "$out" r 2>/dev/null
stamp "done"
