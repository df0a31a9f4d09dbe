#!/usr/bin/env bash
# Session 16, third device call: why the fused path's tensor-core GEMV made 2-8 sequence
# decode slower in the model while it is flat in M alone: the GEMV bench with the calls
# as the decode path makes them (norm prologue, SwiGLU / residual epilogues, LM head rows),
# then 8B decode at 1-8 seqs and the 1 + 3 verify step by fused kernel variant, and one
# profiled run.
#   here:  KEEL_DEVCARRY=.devcarry-s16 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench
#   there: (carry .devcarry-s16) bash scripts/device/s16c_h200.sh
set -uo pipefail
carry=.devcarry-s16; out=${OUT:-/tmp/o}; budget=${BUDGET:-420}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "tests: fused, mla variants"
timeout "$(cap 60)" "$B/keel_test_cuda" --gtest_filter='*FusedGemv*:*FusedRunner*:*MlaFixturesVsCpu*' >"$out/t.log" 2>&1; echo "exit $?"
summary "$out/t.log" 6
stamp "gemv bench"
timeout "$(cap 90)" "$B/cuda_bench" --gemv-bench --model 8b >"$out/gemv.log" 2>&1; echo "exit $?"
sed -n '/as the decode path/,$p' "$out/gemv.log"
run() {  # name, extra flags
  stamp "decode 1-8 seqs + verify: $1"
  timeout "$(cap 70)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 64 --seqs 1,2,4,8 --verify 3 $2 >"$out/$1.log" 2>&1; echo "exit $?"
  grep -E 'decode [0-9]+ seq|verify' "$out/$1.log" | grep -E '^\|' | sed -n '2,10p'
}
run default ""
run m8 "--fused-max-m 8"
run m8w4 "--fused-max-m 8 --fused-waves 4"
run m4core "--fused-max-m 4 --fused-mma 0"
stamp "profile, 2 seqs, fused max m 8"
timeout "$(cap 60)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 32 --seqs 2 --fused-max-m 8 --profile >"$out/prof.log" 2>&1; echo "exit $?"
grep -iE 'gemm|attention|other|profile' "$out/prof.log" | head -12
stamp done
