#!/usr/bin/env bash
# One call that checks a merged tree on the H200 (session 6): the MoE reference fixtures
# made by transformers, the whole CUDA test suite, cuda_bench before/after (8B decode and
# prefill, the old binary from .devcarry-before), the structured-output decode overhead,
# the thinking budget under --device cuda, and the same 8B workload in-process and
# served (served_h200.sh). Each step is capped by what is left of the budget.
#   there: bash scripts/device/final_h200.sh [budget_s]   (carry .devcarry .devcarry-before)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-final}
budget=${1:-540}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
old=.devcarry-before
[ -f "$old/pack.tar.xz" ] && [ ! -d "$old/bin" ] && (cd "$old" && tar -xJf pack.tar.xz)

stamp "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
stamp "MoE fixtures (transformers)"
OUT="$out" timeout "$(cap 90)" python3 scripts/ref/moe_fixtures.py >"$out/moe_fixtures.log" 2>&1
echo "moe_fixtures exit $?"; tail -15 "$out/moe_fixtures.log"

stamp "keel_test_cuda (all)"
timeout "$(cap 150)" "$B/keel_test_cuda" >"$out/tests.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests.log" 30

flags=(--model 8b --seqs 1,64 --decode-steps 32)
for side in before after before after; do
  bin=$B/cuda_bench
  [ "$side" = before ] && bin=$old/bin/cuda_bench
  [ "$(cap 30)" -lt 30 ] && break
  stamp "$side: cuda_bench ${flags[*]}"
  LD_LIBRARY_PATH="$PWD/$old/lib:$LD_LIBRARY_PATH" timeout 30 "$bin" "${flags[@]}" \
    >>"$out/bench_$side.log" 2>&1
  grep -E 'prefill|decode' "$out/bench_$side.log" | tail -4
done

for c in none json; do
  stamp "engine 8B, batch 1, greedy, 128 tokens, constraint $c"
  timeout "$(cap 45)" "$B/cuda_engine_bench" --model 8b --seqs 1 --prompt 512 --output 128 \
    --temperature 0 --sampling device --constraint "$c" >"$out/engine_$c.log" 2>&1
  echo "exit $?"; grep -E '^\||^#' "$out/engine_$c.log" | tail -3
done

stamp "thinking budget, --device cuda"
timeout "$(cap 60)" python3 scripts/device/thinking_budget.py "$B/keel" --device cuda 2>&1 | tail -8

stamp "in-process vs served"
OUT="$out" bash "$here/served_h200.sh" "$(cap 300)"
stamp "done"
