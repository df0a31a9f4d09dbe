#!/usr/bin/env bash
# Session 16: 8B bf16 served by `keel serve --device cuda` with default flags (the fused
# decode path now up to 8 rows on the tensor-core GEMV) at 1, 4 and 8 streams, 512 in /
# 128 out, streamed /v1/completions (serve_load.py).
#   here:  KEEL_DEVCARRY=.devcarry-s16 scripts/device/package.sh build-cuda keel
#   there: (carry .devcarry-s16) bash scripts/device/s16g_h200.sh
set -uo pipefail
carry=.devcarry-s16; out=${OUT:-/tmp/o}; budget=${BUDGET:-420}
source scripts/device/budget_lib.sh
here=scripts/device
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
nvidia-smi --query-gpu=name --format=csv,noheader
model=/tmp/keel-served-models/llama8b
stamp "make-model 8b (bf16)"
timeout "$(cap 200)" "$B/keel" make-model --shape 8b --dtype bf16 --out "$model" >"$out/make.log" 2>&1 || { tail -5 "$out/make.log"; exit 1; }
stamp "keel serve --device cuda, default flags"
"$B/keel" serve --device cuda --port 0 "$model" >"$out/serve.log" 2>&1 &
pids+=($!)
url=""
for _ in $(seq 1 900); do
  url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$out/serve.log" | head -1)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { tail -20 "$out/serve.log"; exit 1; }
for streams in 1 4 8; do
  reqs=$((streams * 6))
  stamp "served: $streams streams, $reqs requests, 512 in / 128 out"
  timeout "$(cap 90)" python3 "$here/serve_load.py" "$url" llama8b --streams "$streams" \
    --input 512 --output 128 --requests "$reqs" --vocab 128000 --warmup >"$out/served_$streams.log" 2>&1
  tail -4 "$out/served_$streams.log"
done
stamp done
