#!/usr/bin/env bash
# Session 22, call B (issue 29): the low-bit grouped GEMM with 1 / 2 / 4 steps of 64 columns a
# pipeline stage (its tests over every format, row tile and step count; gpt-oss-20b decode at
# 16 / 64 / 256 seqs with each; ncu of the decode-sized kernel), and the quantized GEMV at
# M = 1 compiled for three blocks an SM against the compiler's choice.
#   here:  KEEL_DEVCARRY=.devcarry-s22 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_qgemv_bench
#   carry: .devcarry-s22
# Ran on an H100 (session 22) on db5c31a plus the two variants (uncommitted): the low-bit
# GEMM's steps a stage (--moe-lowbit-k-steps; its tests passed at 1 / 2 / 4) and the GEMV's
# three-blocks register cap (--min-blocks). Both lost every measurement (bench/RESULTS.md)
# and were not kept. Its ncu step matched no kernel (demangled names read
# "moe_grouped_lowbit_kernel<(int)16, (int)1, ...>"); a follow-up ran it with
# -k regex:'lowbit_kernel<\(int\)16, \(int\)1,'.
set -uo pipefail
carry=.devcarry-s22; out=${OUT:-/tmp/o}; budget=${BUDGET:-500}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
mkdir -p "$out/r"
r=$out/r

stamp "tests: the low-bit grouped GEMM (every format, tile, steps), MoE, qgemv"
timeout "$(cap 110)" "$B/keel_test_cuda" \
  --gtest_filter='Formats/MoeGroupedLowbit.*:MoeGroupedLowbitShapes.*:*Moe*:*Qgemv*' \
  >"$r/tests.log" 2>&1; echo "exit $?"
summary "$r/tests.log" 12
grep -B3 -A10 'Failure' "$r/tests.log" | grep -vE '^\s*$' | head -40
for ks in 1 2 4; do
  grep -E "lowbit .* steps $ks " "$r/tests.log" |
    awk -v k=$ks '{n++; v=$NF + 0; if (v > m) m = v} END {print "steps", k, ":", n, "cases, worst err/bound", m}'
done

for ks in 1 2 4; do
  stamp "gpt-oss-20b decode 16 / 64 / 256 seqs, low-bit GEMM $ks steps a stage"
  timeout "$(cap 50)" "$B/cuda_bench" --model gpt-oss-20b --no-long-prefill --decode-steps 32 \
    --seqs 64,256 --moe-lowbit-k-steps $ks >"$r/oss_ks$ks.log" 2>&1; echo "exit $?"
  grep -E 'decode|prefill' "$r/oss_ks$ks.log" | head -6
done

stamp "k_qgemv M = 1: compiler's registers vs three blocks an SM"
timeout "$(cap 40)" "$B/cuda_qgemv_bench" --formats q4_k,q6_k,q8_0 --m 1 --waves 0 --kernels dp4a \
  --min-blocks 0,3 >"$r/qgemv_mb.log" 2>&1; echo "exit $?"
grep -E '^\|' "$r/qgemv_mb.log"

if command -v ncu >/dev/null; then
  for ks in 4 1; do
    stamp "ncu: gpt-oss-20b decode at 64 seqs, the low-bit GEMM at 16-row tiles, $ks steps"
    timeout "$(cap 60)" ncu --clock-control none --kernel-name-base demangled \
      -k regex:'lowbit_kernel<16' --launch-count 2 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis \
      "$B/cuda_bench" --model gpt-oss-20b --no-long-prefill --decode-steps 4 --seqs 64 --no-graphs \
      --moe-lowbit-k-steps $ks >"$r/ncu_oss16_ks$ks.log" 2>&1; echo "exit $?"
    grep -E 'lowbit_kernel|Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit (Reg|Shared)|Grid Size|Issued Warp|No Eligible|Warp Cycles Per Issued|Eligible Warps|Dynamic Shared' \
      "$r/ncu_oss16_ks$ks.log" | head -34
  done
fi
tar -cf "$out/s22b.tar" -C "$out" r && rm -rf "$r"
stamp done
