#!/usr/bin/env bash
# One call that checks the merged session-8 tree on the H200, most important first, each
# step capped by what is left of the budget: the whole CUDA test suite (GLM-4.5 and
# gpt-oss on CUDA, sinks, windows per layer, fused MoE decode, grouped GEMM, low-bit
# experts), then Qwen3-30B-A3B-shaped decode and prefill, the gpt-oss-120b shape with
# random MXFP4 experts (memory left for KV, decode, prefill), GLM-4.5-Air with 24 layers,
# (the split down kernel A/B, since deleted), gpt-oss-20b (MXFP4, make-model in the background while the
# tests run) served by `keel serve --device cuda` with default flags at 1 and 256 streams,
# and memcheck on the new kernels.
#   there: bash scripts/device/session8_h200.sh [budget_s]   (carry .devcarry)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-s8}
budget=${1:-480}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

stamp "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
"$B/keel" --version | head -3

model=/tmp/s8-gpt-oss-20b
stamp "background: make-model gpt_oss gpt-oss-20b mxfp4"
(timeout 200 "$B/keel" make-model --arch gpt_oss --shape gpt-oss-20b --dtype mxfp4 \
  --out "$model" >"$out/make_20b.log" 2>&1; echo "make-model exit $?" >>"$out/make_20b.log") &
make_pid=$!
pids+=($make_pid)

stamp "keel_test_cuda (all)"
timeout "$(cap 210)" "$B/keel_test_cuda" >"$out/tests.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests.log" 40
grep -E '^cuda (glm4|gpt)|vs cpu:|gpt-oss-120b shape' "$out/tests.log" | head -30
grep -E -A10 'Failure' "$out/tests.log" | head -100

bench() {  # bench NAME SECONDS ARGS...
  local name=$1 secs=$2
  shift 2
  [ "$(cap "$secs")" -lt 8 ] && { echo "skip $name: out of budget"; return; }
  stamp "cuda_bench $name"
  timeout "$(cap "$secs")" "$B/cuda_bench" --bw 4.8e12 "$@" >"$out/bench_$name.log" 2>&1
  echo "exit $?"
  grep -E '^#|^\|' "$out/bench_$name.log" | grep -v '^|---' | head -20
}
bench qwen3_30b 45 --model qwen3-30b-a3b --seqs 1,2,4,32 --decode-steps 64
bench gpt_oss_120b 45 --model gpt-oss-120b --seqs 1,32 --decode-steps 64
bench glm_air24 25 --model glm-4.5-air --layers 24 --seqs 1,32 --decode-steps 32 --no-long-prefill

stamp "waiting for the gpt-oss-20b files"
timeout "$(cap 60)" tail --pid="$make_pid" -f /dev/null
tail -3 "$out/make_20b.log"
du -sh "$model" 2>/dev/null
if [ -f "$model/config.json" ] && [ "$(cap 100)" -ge 40 ]; then
  stamp "served: keel serve --device cuda, default flags, gpt-oss-20b mxfp4"
  "$B/keel" serve --device cuda --port 0 "$model" >"$out/serve.log" 2>&1 &
  pids+=($!)
  url=""
  for _ in $(seq 1 900); do
    url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$out/serve.log" | head -1)
    [ -n "$url" ] && break
    sleep 0.1
  done
  if [ -n "$url" ]; then
    name=$(basename "$model")
    for streams in 1 256; do
      reqs=$((streams == 1 ? 8 : 512))
      stamp "served: $streams streams, $reqs requests, 512 in / 128 out"
      timeout "$(cap 60)" python3 "$here/serve_load.py" "$url" "$name" --streams "$streams" \
        --input 512 --output 128 --requests "$reqs" --vocab 199000 --warmup | tee "$out/served_$streams.log" | tail -8
    done
    grep -E 'weights|error|Error' "$out/serve.log" | head -8
  else
    tail -20 "$out/serve.log"
  fi
fi

sanitize memcheck 'CudaMoeMxfp4.Dequant*:CudaMoeMxfp4.Slot*:CudaMoeFp8.*:CudaMoeQuant.*:CudaAttention.Sinks*:MoeDecode.*:MoeGroupedGemm.*:*CudaMoeArchVsCpu.*gpt_oss_mxfp4_mixed' 30
stamp "done"
