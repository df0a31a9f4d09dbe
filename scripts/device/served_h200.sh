#!/usr/bin/env bash
# The same workload measured in-process and served (what users see), on the H200:
#   1. cuda_engine_bench (the engine in-process, GPU sampling) on an 8B-shaped model:
#      1 and 256 sequences, 512 prompt tokens, 128 generated;
#   2. `keel serve --device cuda` with default flags on a keel make-model 8B (bf16): one
#      stream (16 requests) and 256 streams (768 requests), 512 in / 128 out, streamed
#      /v1/completions (serve_load.py).
# Builds nothing: runs the carried keel and cuda_engine_bench.
#   here:  KEEL_DEVCARRY=.devcarry scripts/device/package.sh build keel bench/cuda_engine_bench
#   there: (carry .devcarry) bash scripts/device/served_h200.sh [budget_s]
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-served}
budget=${1:-400}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

stamp "in-process: cuda_engine_bench 8b, 1 and 256 seqs, 512 in / 128 out"
timeout "$(cap 120)" "$B/cuda_engine_bench" --model 8b --seqs 1,256 --prompt 512 --output 128 \
  --temperature 0 --sampling device 2>&1 | tee "$out/engine.log"

model=/tmp/keel-served-models/llama8b
if [ ! -f "$model/config.json" ]; then
  stamp "make-model 8b (bf16)"
  timeout "$(cap 200)" "$B/keel" make-model --shape 8b --dtype bf16 --out "$model" || exit 1
fi
stamp "served: keel serve --device cuda, default flags"
"$B/keel" serve --device cuda --port 0 "$model" >"$out/serve.log" 2>&1 &
pids+=($!)
url=""
for _ in $(seq 1 600); do
  url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$out/serve.log" | head -1)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { tail -20 "$out/serve.log"; exit 1; }
for streams in 1 256; do
  reqs=$((streams == 1 ? 16 : 768))
  stamp "served: $streams streams, $reqs requests, 512 in / 128 out"
  timeout "$(cap 200)" python3 "$here/serve_load.py" "$url" llama8b --streams "$streams" \
    --input 512 --output 128 --requests "$reqs" --vocab 128000 --warmup | tee "$out/served_$streams.log"
done
stamp "done"
