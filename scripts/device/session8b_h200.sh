#!/usr/bin/env bash
# Second session-8 call: the whole CUDA suite again after the GLM-4.5 shared-expert fix,
# then gpt-oss-20b (MXFP4 experts, make-model on the device) served by `keel serve
# --device cuda` with default flags at 1 and 256 streams (512 in / 128 out).
#   there: bash scripts/device/session8b_h200.sh [budget_s]   (carry .devcarry: keel, keel_test_cuda)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-s8b}
budget=${1:-360}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
model=/tmp/s8-gpt-oss-20b
stamp "background: make-model gpt_oss gpt-oss-20b mxfp4"
(timeout 200 "$B/keel" make-model --arch gpt_oss --shape gpt-oss-20b --dtype mxfp4 \
  --out "$model" >"$out/make_20b.log" 2>&1; echo "make-model exit $?" >>"$out/make_20b.log") &
make_pid=$!
pids+=($make_pid)
stamp "keel_test_cuda (all)"
timeout "$(cap 120)" "$B/keel_test_cuda" >"$out/tests.log" 2>&1
echo "keel_test_cuda exit $?"
summary "$out/tests.log" 14
grep -E '^cuda (glm4|gpt)' "$out/tests.log" | head -30
grep -E -A6 'Failure' "$out/tests.log" | head -40
stamp "waiting for the gpt-oss-20b files"
timeout "$(cap 150)" tail --pid="$make_pid" -f /dev/null
tail -3 "$out/make_20b.log"
du -sh "$model" 2>/dev/null
[ -f "$model/config.json" ] || exit 0
stamp "served: keel serve --device cuda, default flags, gpt-oss-20b mxfp4"
"$B/keel" serve --device cuda --port 0 "$model" >"$out/serve.log" 2>&1 &
pids+=($!)
url=""
for _ in $(seq 1 1200); do
  url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$out/serve.log" | head -1)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { tail -20 "$out/serve.log"; exit 1; }
for streams in 1 256; do
  reqs=$((streams == 1 ? 8 : 512))
  stamp "served: $streams streams, $reqs requests, 512 in / 128 out"
  timeout "$(cap 90)" python3 "$here/serve_load.py" "$url" "$(basename "$model")" --streams "$streams" \
    --input 512 --output 128 --requests "$reqs" --vocab 199000 --warmup 2>&1 | tee "$out/served_$streams.log" | tail -8
done
grep -iE 'weights|error' "$out/serve.log" | head -8
stamp "done"
