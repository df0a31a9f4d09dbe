#!/usr/bin/env bash
# Session 18, call D: the default model served at batch 1 with its trained draft and the
# final speculation governor (verify and plain steps timed apart), on the GPU and on the
# host CPU, against no speculation (bench/spec_served.py, as s17b). Not run in session 18:
# no device time was left.
#   here:  KEEL_DEVCARRY=.devcarry-s18 scripts/device/package.sh build-cuda keel
set -uo pipefail
carry=.devcarry-s18; out=${OUT:-/tmp/o}; budget=${BUDGET:-330}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
port=8500
run() {  # label, keel serve args...
  local label=$1; shift
  port=$((port + 1))
  "$B/keel" serve --port $port "$@" >"$out/serve-$label.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
  stamp "$label"
  timeout "$(cap 70)" python3 bench/spec_served.py --url "http://127.0.0.1:$port" --label "$label" \
    --json "$out/$label.json" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['label'], round(d['decode_tok_s_median']), round(d['e2e_tok_s']), d.get('verify_steps'), d.get('acceptance_length'), d.get('paused'), d.get('speedup'))"
  kill $pid; wait $pid 2>/dev/null
}
run cuda-off --device cuda
run cuda-draft --device cuda --speculative draft:models/default/draft
run cpu-off
run cpu-draft --speculative draft:models/default/draft
stamp done
