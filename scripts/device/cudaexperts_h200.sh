#!/usr/bin/env bash
# Issue #19, routed experts on CUDA (cudaexperts, session 8): the MoE kernel and model
# tests (the fused decode kernels k_moe_decode.h and the experts' gpt-oss activation --
# biases, clamped SwiGLU -- against float64; tiny qwen3_moe / mixtral against the CPU
# runner), memcheck on the new kernels, then the Qwen3-30B-A3B shape (random bf16 weights
# on the device) decode at 1 / 2 / 4 / 32 sequences and prefill 512 / 8192 on the default
# path (MoE decode on the fused kernels for <= 2 rows), the old unfused decode for A/B
# (--fused-max-m 0), prefill on the per-expert cuBLASLt GEMMs (--moe-grouped off), the
# fused MoE decode at 4 rows (the down kernel split over warps, --moe-split-down on, ran
# here too until it lost and was deleted, issue 29), and with a budget >= 150 ncu per-kernel times of batch-1 decode. About 25 s of GPU time
# (35 s with ncu) after the unpack.
#
#   there:  bash scripts/device/cudaexperts_h200.sh [budget-seconds]   (carry .devcarry_cx)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry_cx}
out=${OUT:-/tmp/keel-cudaexperts}
budget=${1:-100}
source "$(dirname "$0")/budget_lib.sh"
# The test binary was built in this worktree: its source path points at the tree here.
[ -e /work/wt/cudaexperts ] || { mkdir -p /work/wt && ln -s "$PWD" /work/wt/cudaexperts; } 2>/dev/null
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
which nsys ncu compute-sanitizer 2>/dev/null

stamp "MoE tests"
timeout "$(cap 50)" "$B/keel_test_cuda" --gtest_filter='*Moe*' >"$out/tests_moe.log" 2>&1
echo "exit $?"
summary "$out/tests_moe.log" 12
grep -E -A8 'Failure' "$out/tests_moe.log" | head -40

bench() {  # bench NAME ARGS...: Qwen3-30B-A3B shape, random bf16 weights on the device
  local name=$1
  shift
  stamp "cuda_bench $name"
  timeout "$(cap 40)" "$B/cuda_bench" --model qwen3-30b-a3b --bw 4.8e12 "$@" \
    >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^\||ms/step|profile' "$out/bench_$name.log" | head -24
}
bench fused --seqs 1,2,4,32 --decode-steps 64
bench unfused --seqs 1,2 --decode-steps 64 --no-long-prefill --fused-max-m 0
bench per_expert_gemm --seqs 32 --decode-steps 8 --moe-grouped off
bench fused4 --seqs 4 --decode-steps 64 --no-long-prefill --fused-max-m 4

# Per-kernel device time of batch-1 decode steps (2 layers, graphs replayed node by node),
# only when the call has the time (the lead's combined run passes 90).
if [ "$budget" -ge 150 ] && command -v ncu >/dev/null; then
  stamp "ncu decode kernels"
  timeout "$(cap 60)" ncu --clock-control none --graph-profiling node --csv \
    --metrics gpu__time_duration.sum \
    --kernel-name regex:'moe_decode|fused_gemv|decode_attention|qkv_rope_kv|argmax' \
    "$B/cuda_bench" --model qwen3-30b-a3b --layers 2 --no-long-prefill --seqs 1 \
    --decode-steps 4 >"$out/ncu_decode.csv" 2>"$out/ncu_decode.err"
  echo "exit $?"
  grep '^"' "$out/ncu_decode.csv" | python3 -c '
import csv, sys, collections
rows = list(csv.reader(sys.stdin))
k, v = rows[0].index("Kernel Name"), rows[0].index("Metric Value")
t = collections.defaultdict(list)
for r in rows[1:]:
    t[r[k].split("(")[0][-45:]].append(float(r[v].replace(",", "")))
for name, xs in sorted(t.items(), key=lambda kv: -sum(kv[1])):
    print(f"{name:45s} n={len(xs):3d} median={sorted(xs)[len(xs) // 2] / 1e3:7.2f} us")'
fi

sanitize memcheck 'Shapes/MoeBlock.*:MoeDecode.*:MoeGroupedGemm.*' 25
stamp done
