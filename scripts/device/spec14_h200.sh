#!/usr/bin/env bash
# Issue #30 on the GPU machine, session 14: speculative verify on the CUDA runner.
#   1. the CUDA suite's speculative engine test (n-gram drafts: greedy output the same as
#      without, device and host sampling, 1 and 8 at once) and then the whole suite;
#   2. cuda_bench --verify 3 on the Llama 3.1 8B shape: a step of 1 + 3 tokens a sequence
#      against the one-token step, at 1 / 8 / 64 sequences (random bf16 weights);
#   3. served: `keel bench --self models/default --device cuda` on the edit workload (copy-
#      heavy code edits), c = 1, with and without `--speculative ngram` (default flags
#      otherwise), and the acceptance /api/status reported.
#   here:  KEEL_DEVCARRY=.devcarry-spec14 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench keel
#          (cd .devcarry-spec14 && tar -cf - bin lib | xz -9 >pack.tar.xz && rm -r bin lib)
#   there: (carry .devcarry-spec14) bash scripts/device/spec14_h200.sh [budget_s]
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry-spec14}
out=${OUT:-/tmp/keel-spec14}
budget=${1:-480}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,driver_version --format=csv,noheader
filter=${KEEL_CUDA_FILTER:-CudaEngineSpeculative*}

stamp "keel_test_cuda $filter"
timeout "$(cap 120)" "$B/keel_test_cuda" --gtest_filter="$filter" >"$out/tests_new.log" 2>&1
echo "exit $?"
grep -E '^\[ spec \]' "$out/tests_new.log"
summary "$out/tests_new.log" 12
grep -E -A10 'Failure' "$out/tests_new.log" | head -40

stamp "cuda_bench 8b --verify 3"
timeout "$(cap 120)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 64 --seqs 8,64 \
  --verify 3 --bw 4.8e12 >"$out/bench_verify.log" 2>&1
echo "exit $?"
grep -E '^#|^\|' "$out/bench_verify.log" | head -24

served() {  # served NAME [serve args...]: the edit workload, c = 1, on the default model
  local name=$1
  shift
  local sargs=()
  for a in "$@"; do sargs+=("--serve-arg=$a"); done
  stamp "served $name"
  timeout "$(cap 90)" "$B/keel" bench --self models/default --device cuda "${sargs[@]}" \
    --workload edit --prompt-format text --num-prompts 8 --input-len 256 --output-len 128 \
    --concurrency 1 --out "$out/served_$name" >"$out/served_$name.log" 2>&1
  echo "exit $?"
  grep -v '^\s*$' "$out/served_$name.log" | tail -14
}
served off
served ngram --speculative=ngram --num-speculative-tokens=4

stamp "keel_test_cuda (all)"
timeout "$(cap 200)" "$B/keel_test_cuda" >"$out/tests_all.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests_all.log" 16
grep -E -A8 'Failure' "$out/tests_all.log" | head -40
stamp done
