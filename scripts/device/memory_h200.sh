#!/usr/bin/env bash
# Issue 21 on the H200: the KV pool sized from the device with default flags, and
# several models on one GPU. Builds nothing: runs the carried `keel` binary.
#   1. makes an 8B-shaped model (keel make-model --shape 8b, bf16, ~16 GB);
#   2. `keel serve --device cuda` with default flags: /v1/models before the load, then
#      one 131,072-token request (131,064 prompt + 8 generated: the whole context), then
#      the 512-in / 128-out load at 256 streams
#      (serve_load.py; 768 requests), KV blocks used back to 0 after it, /api/status;
#   3. one server, three ids of that model with shares a=0.45 b=0.45 c=0.3, a and b
#      pinned: b then a both load and serve, c is refused with 507 and the byte figures;
#   4. a second server beside the first with a 0.3 share: its engine sees too little free
#      memory and is refused with 507 (what holds the rest: the other server's engines).
#
#   here:  cmake --build build-cuda --target keel && scripts/device/package.sh build-cuda keel
#   there: (carry .devcarry) [KEEL_CARRY=.devcarry] bash scripts/device/memory_h200.sh [budget_s]
# Logs in $OUT (default /tmp/keel-memory): serve*.log, load.log, status*.json.
# A dry run of steps 1-3 on a CPU (what was checked before handing it over):
#   DEVICE=cpu SHAPE=tiny LONG=4096 STREAMS=16 REQUESTS=32 VOCAB=500 bash scripts/device/memory_h200.sh
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-memory}
budget=${1:-580}
device=${DEVICE:-cuda}
shape=${SHAPE:-8b}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"  # unpacks the carry, sets B, stamp and cap
[ -x "$B/keel" ] || { echo "memory_h200: no keel binary at $B/keel" >&2; exit 1; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

# serve NAME ARGS...: starts keel serve on a free port, sets $url (or exits).
serve() {
  local name=$1
  shift
  "$B/keel" serve --device "$device" --port 0 "$@" >"$out/$name.log" 2>&1 &
  pids+=($!)
  url=""
  for _ in $(seq 1 600); do
    url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$out/$name.log" | head -1)
    [ -n "$url" ] && return 0
    sleep 0.1
  done
  echo "memory_h200: $name did not start" >&2
  tail -20 "$out/$name.log" >&2
  exit 1
}
# http METHOD URL [BODY]: prints the HTTP status and the body (python3: the GPU image may lack curl).
http() {
  python3 - "$@" <<'PY'
import sys, urllib.request, urllib.error
method, url = sys.argv[1], sys.argv[2]
body = sys.argv[3].encode() if len(sys.argv) > 3 else None
req = urllib.request.Request(url, data=body, method=method, headers={"content-type": "application/json"})
try:
    with urllib.request.urlopen(req, timeout=600) as r:
        print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
PY
}
complete() {  # URL MODEL: one short greedy completion; prints the HTTP status and body head
  http POST "$1/v1/completions" "{\"model\":\"$2\",\"prompt\":\"Hello\",\"max_tokens\":4,\"temperature\":0}" | head -c 700
  echo
}
gpu_memory() { nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader 2>/dev/null; }
gpu_memory
models=/tmp/keel-memory-models
model=$models/llama$shape
mkdir -p "$models"
if [ ! -f "$model/config.json" ]; then
  stamp "make-model $shape (bf16)"
  timeout "$(cap 300)" "$B/keel" make-model --shape "$shape" --dtype bf16 --out "$model" || exit 1
fi
du -sh "$model"

stamp "serve, default flags: /v1/models before any load"
serve default "$model"
http GET "$url/v1/models"
stamp "one ${LONG:-131072}-token request, then 512 in / 128 out at ${STREAMS:-256} streams"
timeout "$(cap 300)" python3 "$here/serve_load.py" "$url" "llama$shape" --long "${LONG:-131072}" \
  --streams "${STREAMS:-256}" --input 512 --output 128 --requests "${REQUESTS:-768}" \
  --vocab "${VOCAB:-128000}" | tee "$out/load.log"
echo "serve_load exit ${PIPESTATUS[0]}"
http GET "$url/api/status" | cut -d' ' -f2- >"$out/status_default.json"
python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["models"][0]
print("context_length", m["context_length"], "kv_pool", json.dumps(m["kv_pool"]), "memory", json.dumps(m["memory"]))' \
  "$out/status_default.json"
gpu_memory
kill "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null
# On a CPU dry run the shares split a budget (5 x the weights and a 1 MiB pool) instead
# of a device.
extra=()
[ "$device" = cuda ] ||
  extra=(--memory-budget $((5 * ($(du -cb "$model"/*.safetensors | tail -1 | cut -f1) + 1048576))))

stamp "one GPU, three models: a=0.45 b=0.45 (pinned), c=0.3"
mkdir -p "$models/three"
for id in a b c; do ln -sfn "$model" "$models/three/$id"; done
serve three --model-dir "$models/three" --gpu-memory-fraction a=0.45 --gpu-memory-fraction b=0.45 \
  --gpu-memory-fraction c=0.3 --pin a --pin b "${extra[@]}"
echo "b: $(complete "$url" b)"
echo "a: $(complete "$url" a)"
echo "b again: $(complete "$url" b)"
echo "c (must be 507): $(complete "$url" c)"
http GET "$url/api/status" | cut -d' ' -f2- >"$out/status_three.json"
python3 -c 'import json,sys
for m in json.load(open(sys.argv[1]))["models"]:
    print(m["id"], m["state"], "pool", m["kv_pool"]["blocks"], "blocks", m["kv_pool"]["tokens"], "tokens; memory", json.dumps(m["memory"]))' \
  "$out/status_three.json"
gpu_memory

[ "$device" = cuda ] || { stamp "done (step 4 needs a GPU)"; exit 0; }
stamp "a second server beside it: its engine cannot get a 0.3 share (507 from the engine)"
mkdir -p "$models/other"
ln -sfn "$model" "$models/other/d"
serve other --model-dir "$models/other" --gpu-memory-fraction 0.3
echo "d (must be 507): $(complete "$url" d)"
stamp "done"
