#!/usr/bin/env bash
# The CUDA benchmark set on the H200, in one call: device facts, the CUDA test suite,
# then cuda_bench for the Llama 3.2 1B and Llama 3.1 8B shapes (bf16). Prints the tables
# last. Run from the repository root on the GPU machine after scripts/device/package.sh
# here, with .devcarry carried:
#
#   bash bench/run_h200.sh [--skip-tests] [--skip-sanitizer] [--profile]
#
# (The --decode-ab and --fused-ab A/B sets compared kernel variants that were removed
# once measured; their figures stay in bench/RESULTS.md.)
#
# Weights are pseudo-random bf16 made on the device with the models' exact shapes, so
# no 16 GB file has to be written or read (random weights cost the same time as real
# ones). Rooflines: 4.3 TB/s copy bandwidth, 800 TFLOP/s bf16 (measured on this GPU, see
# the issue); peer numbers: a widely used C++ server on this GPU, same shapes.
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
export LD_LIBRARY_PATH="$carry/lib:${LD_LIBRARY_PATH:-}"
out=${OUT:-/tmp/keel-bench}
mkdir -p "$out"
skip_tests=0
skip_san=0
profile=0
for a in "$@"; do
  case $a in
    --skip-tests) skip_tests=1 ;;
    --skip-sanitizer) skip_san=1 ;;
    --profile) profile=1 ;;
  esac
done

# The test binary finds fixtures and the default model under the source directory it
# was built from (/work/main on the dev machine): point that path at this checkout.
src_dir=$(strings "$carry/bin/keel_test_cuda" 2>/dev/null | grep -m1 -E '^/.*/main$' || echo /work/main)
if [ ! -e "$src_dir" ]; then mkdir -p "$(dirname "$src_dir")" && ln -s "$PWD" "$src_dir"; fi

echo "== device"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader || true
df -h . | tail -1

if [ $skip_tests = 0 ]; then
  echo "== tests"
  timeout 120 "$carry/bin/keel_test_cuda" 2>&1 | tee "$out/tests.log" | grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure|error' | head -60
fi
if [ $skip_san = 0 ] && command -v compute-sanitizer >/dev/null; then
  echo "== compute-sanitizer memcheck (kernels, attention, runner)"
  timeout 150 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
    "$carry/bin/keel_test_cuda" --gtest_filter='CudaKernels.*:CudaAttention.*:CudaRunner.*:CudaVsCpu.*:CudaGraphs.*:CudaFlashRunner.*:CudaKvTransfer.*:CudaSample.*:*CudaGgufQuant.*' >"$out/memcheck.log" 2>&1
  echo "memcheck exit $? ($(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$out/memcheck.log") error lines)"
  tail -3 "$out/memcheck.log"
  echo "== compute-sanitizer racecheck (attention kernels: general, flash)"
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$carry/bin/keel_test_cuda" --gtest_filter='CudaAttention.MixedBatch*:CudaAttention.Flash*' >"$out/racecheck.log" 2>&1
  echo "racecheck exit $?"
  tail -3 "$out/racecheck.log"
fi

echo "== benchmarks"
for m in 1b 8b; do
  timeout 150 "$carry/bin/cuda_bench" --model "$m" 2>&1 | tee "$out/bench_$m.log"
done
echo "== 1B from a keel make-model file (bf16 safetensors written here, then loaded)"
timeout 120 "$carry/bin/cuda_bench" --model 1b --make-model /tmp/keel-1b --no-long-prefill --seqs 64 2>&1 | tee "$out/bench_1b_file.log"
echo "== KV block transfers (cache tiers): 8,192 tokens"
timeout 60 "$carry/bin/cuda_bench" --model 8b --kv-transfer 2>&1 | tee "$out/kvx_8b.log"
if [ $profile = 1 ]; then
  echo "== where the time goes (8b, per-phase device time; events between kernels slow it a little)"
  timeout 120 "$carry/bin/cuda_bench" --model 8b --profile --seqs 64,256 --decode-steps 16 2>&1 | tee "$out/profile_8b.log"
fi
echo
echo "peer (C++ server, same GPU and shapes): 8B batch-1 decode 159 tok/s, 512 prefill 19,300 tok/s,"
echo "  aggregate decode 385 / 1,140 / 1,326 / 1,156 tok/s at 8 / 32 / 64 / 128 seqs; 1B batch-1 decode 456 tok/s"
echo "goals (issue 6): 8B decode 240 tok/s, 1B 1,000 tok/s, prefill 30,000 tok/s, 8,000 tok/s at 64 seqs, 15,000 at 256"
