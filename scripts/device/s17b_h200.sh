#!/usr/bin/env bash
# Session 17, call B: the default model served at batch 1 on held-out English (greedy,
# bench/spec_served.py), speculation off / the trained draft (models/default/draft) /
# n-gram lookup, on the H200 (--device cuda) and on the machine's CPU (default flags);
# "draftraw": the draft with --speculative-adaptive off (drafting whether or not it pays).
set -uo pipefail
carry=${CARRY:-.devcarry-s17}; out=${OUT:-/tmp/o}; budget=${BUDGET:-500}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
port=8300
serve_and_bench() {  # label, keel serve args...
  local label=$1; shift
  port=$((port + 1))
  "$B/keel" serve --port $port "$@" >"$out/serve-$label.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  stamp "$label"
  timeout "$(cap 120)" python3 bench/spec_served.py --url "http://127.0.0.1:$port" --label "$label" \
    --json "$out/$label.json" | grep -E '"(label|decode_tok_s_median|e2e_tok_s|acceptance_length|acceptance_rate|accepted_per_position|paused|speedup)"|^ [0-9]'
  kill $pid; wait $pid 2>/dev/null
}
serve_and_bench cuda-off --device cuda
serve_and_bench cuda-draft --device cuda --speculative draft:models/default/draft
serve_and_bench cuda-ngram --device cuda --speculative ngram
serve_and_bench cuda-draftraw --device cuda --speculative draft:models/default/draft --speculative-adaptive off
serve_and_bench cpu-off
serve_and_bench cpu-draft --speculative draft:models/default/draft
serve_and_bench cpu-ngram --speculative ngram
serve_and_bench cpu-draftraw --speculative draft:models/default/draft --speculative-adaptive off
python3 - "$out" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
rows = {p.stem: json.loads(p.read_text()) for p in d.glob("c*-*.json")}
for dev in ("cuda", "cpu"):
    off = rows.get(f"{dev}-off")
    for m in ("off", "draft", "ngram", "draftraw"):
        r = rows.get(f"{dev}-{m}")
        if not r or not off: continue
        same = sum(a == b for a, b in zip(r["texts"], off["texts"]))
        print(f"{dev} {m}: decode {r['decode_tok_s_median']:.0f} tok/s ({r['decode_tok_s_median']/off['decode_tok_s_median']:.2f}x), "
              f"e2e {r['e2e_tok_s']:.0f} ({r['e2e_tok_s']/off['e2e_tok_s']:.2f}x), acceptance length "
              f"{r.get('acceptance_length', 0):.2f}, texts equal to off {same}/{len(off['texts'])}")
PY
stamp done
