#!/usr/bin/env bash
# Session 20, call B: speculative decoding on the 8B shape served (issue 30: batch 1, n-gram
# drafts with the default governor against no speculation, bench/spec_served.py), the 8B
# Q4_K_M default quantized path against bf16 at 1 / 16 / 64 / 256 seqs in one run (issue
# 29: when may `auto` keep GGUF), and, when scripts/default_model/train_eagle3.py is carried,
# the default model's EAGLE-3 head trained (issue 30; its own budget).
#   here:  KEEL_DEVCARRY=.devcarry-s20 scripts/device/package.sh build-cuda keel bench/cuda_bench
set -uo pipefail
carry=.devcarry-s20; out=${OUT:-/tmp/o}; budget=${BUDGET:-560}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name --format=csv,noheader
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

if [ -f scripts/device/s20_eagle3.sh ] && [ "${SKIP_EAGLE3:-0}" != 1 ]; then
  stamp "EAGLE-3 head for the default model"
  timeout "$(cap 250)" bash scripts/device/s20_eagle3.sh --train-seconds 120 --deadline-seconds 220 \
    >"$out/eagle3.log" 2>&1; echo "exit $?"
  tail -30 "$out/eagle3.log"
fi

m=/tmp/s20/llama8b
stamp "make-model 8b (bf16, the default model's tokenizer)"
timeout "$(cap 120)" "$B/keel" make-model --shape 8b --tokenizer models/default --out "$m" 2>&1 | tail -1
port=8600
spec() {  # label, keel serve args...
  local label=$1; shift
  port=$((port + 1))
  "$B/keel" serve --device cuda --port $port "$@" "$m" >"$out/serve-$label.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  for _ in $(seq 1 900); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
  stamp "8b served, batch 1: $label"
  timeout "$(cap 90)" python3 bench/spec_served.py --url "http://127.0.0.1:$port" --label "$label" \
    --num-prompts 12 --json "$out/spec_$label.json" | python3 -c "import json,sys; d=json.load(sys.stdin); print({k: d.get(k) for k in ('label', 'decode_tok_s_median', 'e2e_tok_s', 'verify_steps', 'acceptance_length', 'paused', 'speedup')})"
  kill $pid; wait $pid 2>/dev/null
}
spec off
spec ngram --speculative ngram
spec ngram_raw --speculative ngram --speculative-adaptive off
rm -rf "$m"

stamp "8b q4_k_m default path vs bf16"
timeout "$(cap 90)" "$B/keel" make-model --shape 8b --dtype q4_k_m --format gguf --out /tmp/s20/q4km.gguf 2>&1 | tail -1
timeout "$(cap 80)" "$B/cuda_bench" --model 8b --weights /tmp/s20/q4km.gguf --keep-quantized on \
  --no-long-prefill --decode-steps 32 --seqs 1,16,64,256 >"$out/q4_default.log" 2>&1; echo "exit $?"
grep -E '^\| 8b|decode' "$out/q4_default.log" | head -10
timeout "$(cap 60)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 32 --seqs 1,16,64,256 \
  >"$out/bf16.log" 2>&1; echo "exit $?"
grep -E '^\| 8b|decode' "$out/bf16.log" | head -10
stamp done
