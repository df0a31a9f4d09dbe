#!/usr/bin/env bash
# Session 22, call A: the CUDA suite (first GPU run of the MTP layer on CUDA, re-run of the
# EAGLE-3 bounds set from session 21's first run; issue 30), then where a batch-1 Q4_K_M step
# goes (issue 29): the quantized GEMV alone at the 8B shapes with and without the L2 prefetch
# of a warp's rows, ncu's view of two of them (occupancy, stall reasons, DRAM throughput),
# the 8B Q4_K_M decode in-process with / without that prefetch, and ncu's per-kernel times of
# its decode step (graph nodes, kernels run one at a time).
#   here:  KEEL_DEVCARRY=.devcarry-s22 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_qgemv_bench
#   carry: .devcarry-s22
# Ran on an H100 (session 22) at db5c31a. The L2 prefetch lost at every shape and in the
# model (bench/RESULTS.md) and was deleted after, with its flags (--l2-prefetch,
# --qgemv-l2-prefetch).
set -uo pipefail
carry=.devcarry-s22; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r

stamp "CUDA suite"
timeout "$(cap 230)" "$B/keel_test_cuda" >"$r/all.log" 2>&1; echo "exit $?"
summary "$r/all.log" 20
grep -B3 -A10 'Failure' "$r/all.log" | grep -vE '^\s*$' | head -60
grep -E 'MtpLayer|Eagle3|HiddenRows|EngineSpeculative' "$r/all.log" | grep -E 'OK|FAILED' | head -30

stamp "k_qgemv alone, M = 1, L2 prefetch of a warp's rows 0 / 8 KiB / 32 KiB / all"
timeout "$(cap 60)" "$B/cuda_qgemv_bench" --formats q4_k,q6_k,q8_0 --m 1,2 --waves 0 --kernels dp4a \
  --l2-prefetch 0,8192,32768,1048576 >"$r/qgemv.log" 2>&1; echo "exit $?"
grep -E '^\||^#' "$r/qgemv.log"

if command -v ncu >/dev/null; then
  for shape in qkv down; do
    stamp "ncu: q4_k $shape M = 1"
    timeout "$(cap 40)" ncu --clock-control none -k regex:qgemv --launch-skip 40 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis \
      "$B/cuda_qgemv_bench" --formats q4_k --m 1 --waves 0 --kernels dp4a --shapes "$shape" \
      >"$r/ncu_$shape.log" 2>&1; echo "exit $?"
    grep -E 'Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Grid Size|Issued Warp|No Eligible|Warp Cycles Per Issued|Stall|Eligible Warps|L2 Hit|L1/TEX Hit|Waves Per SM' \
      "$r/ncu_$shape.log" | head -30
  done
fi

g=/tmp/q4km.gguf
for pf in 0 32768; do
  stamp "8B Q4_K_M decode 1 / 2 seqs, L2 prefetch $pf"
  timeout "$(cap 90)" "$B/cuda_bench" --model 8b --make-gguf $g --gguf-dtype q4_k_m --no-long-prefill \
    --decode-steps 64 --seqs 1,2 --qgemv-l2-prefetch $pf >"$r/q4km_pf$pf.log" 2>&1; echo "exit $?"
  grep -E 'decode' "$r/q4km_pf$pf.log" | head -4
done
stamp "gpt-oss-20b decode 64 seqs, profiled"
timeout "$(cap 60)" "$B/cuda_bench" --model gpt-oss-20b --no-long-prefill --decode-steps 16 --seqs 64 \
  --profile >"$r/oss_profile.log" 2>&1; echo "exit $?"
grep -vE '^\|--' "$r/oss_profile.log" | tail -14
if command -v ncu >/dev/null; then
  stamp "ncu: gpt-oss-20b at 64 seqs, the low-bit grouped GEMM and the MoE kernels"
  timeout "$(cap 90)" ncu --clock-control none -k regex:'moe_grouped_lowbit' --launch-skip 60 --launch-count 2 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    "$B/cuda_bench" --model gpt-oss-20b --no-long-prefill --decode-steps 8 --seqs 64 --no-graphs \
    >"$r/ncu_oss_lowbit.log" 2>&1; echo "exit $?"
  grep -E 'moe_grouped|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Grid Size|Issued Warp|No Eligible|Warp Cycles Per Issued|Stall|Eligible Warps|L2 Hit|Waves Per SM|Dynamic Shared' \
    "$r/ncu_oss_lowbit.log" | head -50
  stamp "ncu: gpt-oss-20b at 64 seqs, per-kernel times (graph nodes)"
  timeout "$(cap 90)" ncu --clock-control none --graph-profiling node --csv \
    --metrics gpu__time_duration.sum --launch-count 2500 \
    "$B/cuda_bench" --model gpt-oss-20b --no-long-prefill --seqs 64 --decode-steps 3 \
    >"$r/ncu_oss.csv" 2>"$r/ncu_oss.err"; echo "exit $?"
  grep '^"' "$r/ncu_oss.csv" | python3 -c '
import csv, sys, collections
rows = list(csv.reader(sys.stdin))
k, v = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
t = collections.defaultdict(list)
for r in rows[1:]:
    t[r[k].split("(")[0][-60:]].append(float(r[v].replace(",", "")))
for name, xs in sorted(t.items(), key=lambda kv: -sum(kv[1])):
    print(f"{name:60s} n={len(xs):4d} median={sorted(xs)[len(xs) // 2] / 1e3:8.2f} us sum={sum(xs) / 1e6:7.3f} ms")' | head -25
fi
stamp "8B Q4_K_M decode 1 seq, profiled (graphs off, events between phases)"
timeout "$(cap 60)" "$B/cuda_bench" --model 8b --make-gguf $g --gguf-dtype q4_k_m --no-long-prefill \
  --decode-steps 16 --seqs 1 --profile >"$r/q4km_profile.log" 2>&1; echo "exit $?"
grep -vE '^\|--' "$r/q4km_profile.log" | tail -16

if command -v ncu >/dev/null; then
  stamp "ncu: 8B Q4_K_M batch-1 decode kernels (graph nodes)"
  timeout "$(cap 120)" ncu --clock-control none --graph-profiling node --csv \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum --launch-count 1400 \
    "$B/cuda_bench" --model 8b --make-gguf $g --gguf-dtype q4_k_m --no-long-prefill --seqs 1 \
    --decode-steps 4 >"$r/ncu_decode.csv" 2>"$r/ncu_decode.err"
  echo "exit $?"
  grep '^"' "$r/ncu_decode.csv" | python3 -c '
import csv, sys, collections
rows = list(csv.reader(sys.stdin))
k, m, v = rows[0].index("Kernel Name"), rows[0].index("Metric Name"), rows[0].index("Metric Value")
t = collections.defaultdict(list); b = collections.defaultdict(list)
for r in rows[1:]:
    name = r[k].split("(")[0][-60:]
    val = float(r[v].replace(",", ""))
    (t if r[m].startswith("gpu__time") else b)[name].append(val)
for name, xs in sorted(t.items(), key=lambda kv: -sum(kv[1])):
    bs = sorted(b.get(name, [0]))
    print(f"{name:60s} n={len(xs):4d} median={sorted(xs)[len(xs) // 2] / 1e3:8.2f} us sum={sum(xs) / 1e6:7.3f} ms  dram median {bs[len(bs) // 2] / 1e6:7.2f} MB")' | head -30
  tail -3 "$r/ncu_decode.err"
fi
tar -cf "$out/s22a.tar" -C "$out" r && rm -rf "$r"
stamp done
