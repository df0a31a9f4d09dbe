#!/usr/bin/env bash
# Third session-8 call: the whole CUDA suite with the GLM fixture bounds for grouped-routing
# flips, GLM-4.5-Air (24 layers) decode again now that its shared expert runs, and
# gpt-oss-20b in-process (random MXFP4 experts) beside its served figure.
#   there: bash scripts/device/session8c_h200.sh [budget_s]   (carry .devcarry: keel_test_cuda, cuda_bench)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-s8c}
budget=${1:-150}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
stamp "keel_test_cuda (all)"
timeout "$(cap 80)" "$B/keel_test_cuda" >"$out/tests.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests.log" 12
grep -E '^cuda (glm4|gpt).*transformers' "$out/tests.log" | head -30
grep -E -A6 'Failure' "$out/tests.log" | head -30
bench() {  # bench NAME SECONDS ARGS...
  local name=$1 secs=$2
  shift 2
  stamp "cuda_bench $name"
  timeout "$(cap "$secs")" "$B/cuda_bench" --bw 4.8e12 "$@" >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^#|^\|' "$out/bench_$name.log" | grep -v '^|---' | head -16
}
bench glm_air24 25 --model glm-4.5-air --layers 24 --seqs 1,32 --decode-steps 32 --no-long-prefill
bench gpt_oss_20b 30 --model gpt-oss-20b --seqs 1,32,256 --decode-steps 32 --no-long-prefill
stamp "done"
