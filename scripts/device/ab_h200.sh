#!/usr/bin/env bash
# A before/after check of the CUDA runner in one call on the GPU machine: the new tree's
# whole CUDA test suite, then `cuda_bench` of the old and the new binaries interleaved
# (8B: prefill 512 and 8,192, decode at 1 and 64 sequences), two rounds while the budget
# lasts. Logs go to $OUT.
#
#   here:   build the new tree's keel_test_cuda and cuda_bench, and the old tree's
#           cuda_bench (git archive of the old commit, its own build directory), then
#           KEEL_DEVCARRY=.devcarry scripts/device/package.sh build tests/keel_test_cuda bench/cuda_bench
#           KEEL_DEVCARRY=.devcarry-before scripts/device/package.sh OLD/build bench/cuda_bench
#           (cd .devcarry && tar -cJf pack.tar.xz bin lib && rm -rf bin lib), the same for
#           .devcarry-before; both folders must be in the checkout the device tool sends.
#   there:  bash scripts/device/ab_h200.sh [budget-seconds]   (carry .devcarry .devcarry-before)
set -uo pipefail
out=${OUT:-/tmp/keel-ab}
budget=${1:-200}
old=${KEEL_CARRY_BEFORE:-.devcarry-before}
[ -f "$old/pack.tar.xz" ] && [ ! -d "$old/bin" ] && (cd "$old" && tar -xJf pack.tar.xz)
carry=${KEEL_CARRY:-.devcarry}
source "$(dirname "$0")/budget_lib.sh"

stamp "keel_test_cuda (all)"
timeout "$(cap 120)" "$B/keel_test_cuda" >"$out/tests.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests.log" 12

flags=(--model 8b --seqs 1,64 --decode-steps 32)
for round in 1 2; do
  for side in before after; do
    bin=$B/cuda_bench
    [ "$side" = before ] && bin=$old/bin/cuda_bench
    [ "$(cap 30)" -lt 30 ] && break 2
    stamp "$side, round $round: cuda_bench ${flags[*]}"
    LD_LIBRARY_PATH="$PWD/$old/lib:$LD_LIBRARY_PATH" timeout 30 "$bin" "${flags[@]}" \
      >"$out/bench_${side}_$round.log" 2>&1
    grep -E 'prefill|decode' "$out/bench_${side}_$round.log" | head -6
  done
done
stamp "done"
