#!/usr/bin/env bash
# Session 28, call B (issue 29): the MXFP4 A-operand grouped GEMM with its weight words copied
# along rows (8-byte cp.async, a warp over five rows' contiguous bytes, not 16 rows'), a 6-slot
# ring, and the MXFP4 decode's signs gathered by one byte permute: its tests and the MXFP4
# models', then
# gpt-oss-20b decode 64 / 256 seqs and prefill against the first kernel (`--moe-mxfp4-mma off`,
# same binary), and gpt-oss-20b served at 64 / 256 streams (default flags).
#   here:  KEEL_DEVCARRY=.devcarry-s28b scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench keel   (then xz -9)
#   carry: .devcarry-s28b
# (`--moe-mxfp4-mma` went with the first kernel's MXFP4 path in 19d2855: this script ran
# binaries of a112aa4 + the call-B kernel changes, which still had it.)
set -uo pipefail
carry=.devcarry-s28b; out=${OUT:-/tmp/o}; budget=${BUDGET:-380}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r
stamp "tests: the low-bit grouped GEMMs, the MXFP4 MoE models"
timeout "$(cap 90)" "$B/keel_test_cuda" \
  --gtest_filter='MoeGroupedLowbit*:*CudaMoeLowbitGemm*:*gpt_oss*:*Mxfp4*:*MXFP4*:*mxfp4*' \
  >"$r/tests.log" 2>&1
echo "exit $?"
summary "$r/tests.log" 6
grep -E '^lowbit .*MXFP4' "$r/tests.log" | sort -t' ' -k17 -g | tail -3
grep -B3 -A10 'Failure' "$r/tests.log" | grep -vE '^\s*$' | head -30
for v in on1 off on2; do
  stamp "gpt-oss-20b decode 64 / 256 seqs, prefill (--moe-mxfp4-mma ${v%[12]})"
  timeout "$(cap 110)" "$B/cuda_bench" --model gpt-oss-20b --no-long-prefill --decode-steps 32 \
    --seqs 64,256 --moe-mxfp4-mma "${v%[12]}" >"$r/goss_$v.log" 2>&1
  echo "exit $?"
  grep -E 'decode|prefill' "$r/goss_$v.log" | head -8
done
m=/tmp/s28/gpt-oss-20b
stamp "make-model gpt-oss-20b (MXFP4 experts)"
timeout "$(cap 70)" "$B/keel" make-model --arch gpt_oss --shape gpt-oss-20b --dtype mxfp4 \
  --out "$m" 2>&1 | tail -1
serve_one goss_64 64 $m KEEL_UNUSED=1
serve_one goss_256 256 $m KEEL_UNUSED=1
tar -czf "$out/s28b.tgz" -C "$out" r 2>/dev/null
stamp "done"
