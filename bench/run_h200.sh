#!/usr/bin/env bash
# The CUDA benchmark set on the H200, in one call: device facts, the CUDA test suite,
# then cuda_bench for the Llama 3.2 1B and Llama 3.1 8B shapes (bf16). Prints the tables
# last. Run from the repository root on the GPU machine after scripts/device/package.sh
# here, with .devcarry carried:
#
#   bash bench/run_h200.sh [--skip-tests] [--skip-sanitizer] [--profile]
#   bash bench/run_h200.sh --decode-ab [--budget SECONDS]
#   bash bench/run_h200.sh --fused-ab [--budget SECONDS]
#
# --decode-ab: the decode A/B set only, in one short call: the tests, then 8B decode at
# 1 / 64 / 256 seqs with the old kernels (tiles-fast attention blocks, registers for 8
# heads per group, cuBLASLt at M = 1) against the new ones (kv-heads-fast blocks, registers
# sized to the group, GEMV kernel for M <= 4), the GEMV-vs-cuBLASLt layer table, then each
# attention change alone and per-phase profiles while the budget (default 170 s) lasts.
#
# --fused-ab: the batch-1 / small-batch decode A/B (perf, issue 6): the tests, then 8B
# (1, 2, 4, 64 seqs) and 1B (1, 2, 4) decode with the old defaults (unfused kernels,
# split-K rounded up) against the new ones (fused decode kernels with PDL for <= 2 rows,
# split-K rounded down), and the rounding alone. Per-layer GEMV table: --gemv-bench.
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
decode_ab=0
fused_ab=0
budget=170
prev=
for a in "$@"; do
  case $a in
    --skip-tests) skip_tests=1 ;;
    --skip-sanitizer) skip_san=1 ;;
    --profile) profile=1 ;;
    --decode-ab) decode_ab=1 ;;
    --fused-ab) fused_ab=1 ;;
  esac
  if [ "$prev" = --budget ]; then budget=$a; fi
  prev=$a
done

# The test binary finds fixtures and the default model under the source directory it
# was built from (/work/main on the dev machine): point that path at this checkout.
src_dir=$(strings "$carry/bin/keel_test_cuda" 2>/dev/null | grep -m1 -E '^/.*/main$' || echo /work/main)
if [ ! -e "$src_dir" ]; then mkdir -p "$(dirname "$src_dir")" && ln -s "$PWD" "$src_dir"; fi

echo "== device"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader || true
df -h . | tail -1

if [ $fused_ab = 1 ]; then
  start=$SECONDS
  left() { echo $((budget - (SECONDS - start))); }
  timeout 120 "$carry/bin/keel_test_cuda" >"$out/tests.log" 2>&1
  test_rc=$?
  run_bench() {  # name (log name, or - for none), then flags
    local name=$1 log=/dev/null
    shift
    [ "$name" != - ] && log="$out/$name.log"
    if [ "$(left)" -lt 15 ]; then
      echo "== $name: skipped (budget)"
      return
    fi
    echo "== $name: cuda_bench $*"
    timeout "$(left)" "$carry/bin/cuda_bench" "$@" 2>&1 | tee "$log" | grep -E 'decode [0-9]|per step|rror'
  }
  # Old defaults (unfused kernels, split-K rounded up) against the new ones, interleaved.
  old=(--fused-max-m 0 --split-round up)
  c8=(--model 8b --no-long-prefill --seqs 2,4,64 --decode-steps 64)
  c1=(--model 1b --no-long-prefill --seqs 2,4 --decode-steps 64)
  run_bench 8b_old "${c8[@]}" "${old[@]}"
  run_bench 8b_new "${c8[@]}"
  run_bench - "${c8[@]}" "${old[@]}"
  run_bench - "${c8[@]}"
  run_bench - "${c8[@]}" --split-round up
  run_bench 1b_old "${c1[@]}" "${old[@]}"
  run_bench 1b_new "${c1[@]}"
  run_bench - "${c1[@]}" --split-round up
  run_bench - --model 8b --no-long-prefill --seqs 1 --decode-steps 16 --profile
  echo "== tests: keel_test_cuda exit $test_rc"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure|^\[  FAILED' "$out/tests.log" | tail -25
  echo "== done in $((SECONDS - start)) s"
  exit 0
fi

if [ $decode_ab = 1 ]; then
  start=$SECONDS
  left() { echo $((budget - (SECONDS - start))); }
  echo "== tests"
  timeout 90 "$carry/bin/keel_test_cuda" >"$out/tests.log" 2>&1
  echo "keel_test_cuda exit $?"
  grep -E '^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]|Failure' "$out/tests.log" | head -30
  common=(--model 8b --no-long-prefill --seqs 64,256 --decode-steps 32)
  old=(--attn-order tiles --decode-group generic --gemv-max-m 0)
  new=(--attn-order heads --decode-group exact --gemv-max-m 4)
  run_bench() {  # name, then flags
    local name=$1
    shift
    if [ "$(left)" -lt 20 ]; then
      echo "== $name: skipped (budget)"
      return
    fi
    echo "== $name: cuda_bench $*"
    timeout "$(left)" "$carry/bin/cuda_bench" "$@" 2>&1 | tee "$out/$name.log" | grep -E '^#|decode|per step|ceiling|\|'
  }
  run_bench old "${common[@]}" "${old[@]}"
  run_bench new "${common[@]}" "${new[@]}"
  run_bench gemv --gemv-bench
  run_bench heads_only "${common[@]}" --attn-order heads --decode-group generic --gemv-max-m 0
  run_bench exact_only "${common[@]}" --attn-order tiles --decode-group exact --gemv-max-m 0
  prof=(--model 8b --no-long-prefill --seqs 256 --decode-steps 8 --profile)
  run_bench profile_new "${prof[@]}" "${new[@]}"
  run_bench profile_old "${prof[@]}" "${old[@]}"
  echo "== done in $((SECONDS - start)) s"
  exit 0
fi

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
echo "== 8b decode with the flash kernel for large decode batches, for comparison"
timeout 90 "$carry/bin/cuda_bench" --model 8b --flash-decode --no-long-prefill --seqs 64,256 --decode-steps 64 2>&1 | tee "$out/bench_8b_flashdecode.log"
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
