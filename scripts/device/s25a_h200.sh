#!/usr/bin/env bash
# Session 25, call A (issue 29): the dp4a GEMV streamed through shared memory
# (QgemvParams::stream_stages, k_qgemv_stream.cu) against the register kernel it would
# replace: its tests (float reference, agreement with the register kernel at every ring
# depth, run_linear's choice), racecheck of the warp ring, the GEMV alone at the 8B shapes
# (M = 1-3, ring depths 2 / 3 / 4 / 6), ncu's view of both kernels at q4_k M = 1, and 8B
# Q4_K_M decode in-process at 1 / 2 seqs streamed or not (register kernel first and last).
#   here:  KEEL_DEVCARRY=.devcarry-s25 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_qgemv_bench
#   carry: .devcarry-s25
set -uo pipefail
carry=.devcarry-s25; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r

stamp "tests: the quantized GEMV (all kernels), run_linear, the fused quantized runner"
timeout "$(cap 150)" "$B/keel_test_cuda" \
  --gtest_filter='*Qgemv*:QuantLinear.*:CudaFusedRunner.QuantizedDecodeMatchesUnfusedPath' \
  >"$r/tests.log" 2>&1; echo "exit $?"
summary "$r/tests.log" 12
grep -B3 -A12 'Failure' "$r/tests.log" | grep -vE '^\s*$' | head -60
grep -E 'Streamed' "$r/tests.log" | grep -E 'OK|FAILED' | head -12

stamp "k_qgemv alone: dp4a registers vs streamed (ring depth in the waves column)"
timeout "$(cap 120)" "$B/cuda_qgemv_bench" --formats q4_k,q6_k,q8_0 --m 1,2,3 --waves 0 \
  --kernels dp4a,dp4s --stages 2,3,4,6 >"$r/qgemv.log" 2>&1; echo "exit $?"
grep -E '^\||^#' "$r/qgemv.log"

g=/tmp/q4km.gguf
for st in 0 3 4 6 2 0; do
  stamp "8B Q4_K_M decode 1 / 2 seqs, --qgemv-stream-stages $st"
  timeout "$(cap 120)" "$B/cuda_bench" --model 8b --make-gguf $g --gguf-dtype q4_k_m --no-long-prefill \
    --decode-steps 64 --seqs 1,2 --qgemv-stream-stages $st >"$r/q4km_s$st.log" 2>&1; echo "exit $?"
  grep -E 'decode' "$r/q4km_s$st.log" | head -4
done

if command -v ncu >/dev/null; then
  for kern in dp4a dp4s; do
    for shape in qkv gate_up; do
      stamp "ncu: q4_k $shape M = 1, $kern (ring depth 4)"
      timeout "$(cap 40)" ncu --clock-control none -k regex:qgemv --launch-skip 40 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section MemoryWorkloadAnalysis \
        "$B/cuda_qgemv_bench" --formats q4_k --m 1 --waves 0 --stages 4 --kernels $kern \
        --shapes "$shape" >"$r/ncu_${kern}_$shape.log" 2>&1; echo "exit $?"
      grep -E 'Duration|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Issued Warp|No Eligible|Warp Cycles Per Issued|Eligible Warps|Dynamic Shared' \
        "$r/ncu_${kern}_$shape.log" | head -16
    done
  done
fi

sanitize racecheck 'Formats/Qgemv.StreamedAgreesWithTheRegisterKernel/q4_k' 90
tar -czf "$out/s25a.tgz" -C "$out" r 2>/dev/null
stamp "done"
