#!/usr/bin/env bash
# Batch-1 / small-batch decode on the GPU machine after a kernel change: the whole CUDA
# test suite, compute-sanitizer memcheck and racecheck on the tests named by $SAN_FILTER,
# 8B and 1B decode at 1, 4, 8 and 64 sequences, the device sampler alone, the engine at
# $ENGINE_SEQS (default 1,8) sequences (greedy and temperature 1), and with NCU=1 an ncu
# kernel-time listing of a 1B batch-1 step (where the time of a step goes, kernel by
# kernel). Same carry and budget rules as verify_h200.sh.
#
#   there:  SAN_FILTER='...' [ENGINE_SEQS=1,8,64] [NCU=1] bash scripts/device/decode_h200.sh [budget]
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry-verify}
out=${OUT:-/tmp/keel-decode}
budget=${1:-470}
source "$(dirname "$0")/budget_lib.sh"

stamp "keel_test_cuda (all)"
timeout "$(cap 150)" "$B/keel_test_cuda" >"$out/tests.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests.log" 12
grep -E -A8 'Failure' "$out/tests.log" | head -40

if [ -n "${SAN_FILTER:-}" ]; then
  sanitize memcheck "$SAN_FILTER" 90
  sanitize racecheck "$SAN_FILTER" 90
fi

for model in 8b 1b; do
  stamp "decode $model, 1/4/8/64 seqs"
  timeout "$(cap 60)" "$B/cuda_bench" --model "$model" --no-long-prefill --seqs 1,4,8,64 \
    --decode-steps 64 >"$out/decode_$model.log" 2>&1
  grep -E 'decode' "$out/decode_$model.log"
done
if [ -x "$B/cuda_sample_bench" ]; then
  stamp "device sampler alone (launch_sample, 128k vocabulary)"
  timeout "$(cap 60)" "$B/cuda_sample_bench" --reps 20 2>&1 | tee "$out/sample_bench.log" | grep -E '^\||^#'
fi
for t in 0 1; do
  stamp "engine 8B, ${ENGINE_SEQS:-1,8} seqs, temperature $t"
  timeout "$(cap 60)" "$B/cuda_engine_bench" --model 8b --seqs "${ENGINE_SEQS:-1,8}" --output 128 \
    --temperature "$t" --sampling device 2>&1 | grep -E '\|' | tail -5
done
if [ -n "${NCU:-}" ]; then
  stamp "ncu: 1B batch-1 kernels"
  timeout "$(cap 60)" ncu --clock-control none --graph-profiling node --metrics \
    gpu__time_duration.sum --csv --log-file "$out/ncu_1b.csv" "$B/cuda_bench" --model 1b \
    --no-long-prefill --seqs 1 --decode-steps 3 >/dev/null 2>&1
  echo "ncu exit $?"
fi
stamp "done"
