#!/usr/bin/env bash
# Session 26, call C (issue 29): with the new defaults (K-quant steps of 9..64 rows on the
# dequantizing bf16 GEMM, its weights staged through shared memory; GGUF experts on the
# integer-dot GEMV's expert slots), the whole CUDA suite, 8B Q4_K_M and a Qwen3-30B-A3B Q4_K_M of
# 8 layers decoded in-process, and 8B Q4_K_M served at 16 streams kept quantized and with
# default flags (bf16).
#   here:  KEEL_DEVCARRY=.devcarry-s26c scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench keel  (then xz -9)
#   carry: .devcarry-s26c
set -uo pipefail
carry=.devcarry-s26c; out=${OUT:-/tmp/o}; budget=${BUDGET:-480}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r
stamp "the whole CUDA suite"
timeout "$(cap 300)" "$B/keel_test_cuda" >"$r/tests_all.log" 2>&1
echo "exit $?"
summary "$r/tests_all.log" 12
grep -B3 -A10 'Failure' "$r/tests_all.log" | grep -vE '^\s*$' | head -30
g=/tmp/q4_k_m.gguf
stamp "8B q4_k_m decode 1 / 16 / 64 seqs (defaults, kept quantized)"
timeout "$(cap 90)" "$B/cuda_bench" --model 8b --make-gguf $g --gguf-dtype q4_k_m --keep-quantized on \
  --no-long-prefill --decode-steps 32 --seqs 1,16,64 >"$r/q4km.log" 2>&1
echo "exit $?"
grep -E 'decode|prefill' "$r/q4km.log"
q=/tmp/q3moe.gguf
timeout "$(cap 60)" "$B/keel" make-model --arch qwen3_moe --shape qwen3-30b-a3b --layers 8 \
  --dtype q4_k_m --format gguf --out $q 2>&1 | tail -1
stamp "qwen3-30b-a3b q4_k_m (8 layers) decode 1 / 4 / 16 / 64 seqs (defaults)"
timeout "$(cap 60)" "$B/cuda_bench" --model qwen3-30b-a3b --weights $q --keep-quantized on \
  --no-long-prefill --decode-steps 32 --seqs 1,4,16,64 >"$r/q3.log" 2>&1
echo "exit $?"
grep -E 'decode' "$r/q3.log"
port=18700
up() { python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null; }
serve_one() {  # label, streams, gguf, then env assignments
  local label=$1 streams=$2 g=$3
  shift 3
  port=$((port + 1))
  env "$@" "$B/keel" serve --device cuda --port $port $g >"$r/serve_$label.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  for _ in $(seq 1 600); do up "http://127.0.0.1:$port/health" && break; sleep 0.2; done
  stamp "served 8B q4_k_m ($label): $streams streams, 512 in / 128 out"
  timeout "$(cap 90)" python3 "$here/serve_load.py" "http://127.0.0.1:$port" q4_k_m \
    --streams $streams --input 512 --output 128 --requests $((streams * 2)) --vocab 128000 \
    --warmup 2>&1 | grep -E 'load:|errors' | head -3
  kill $pid
  wait $pid 2>/dev/null
}
serve_one quantized_16 16 $g KEEL_QUANTIZED_WEIGHTS=on
serve_one default_16 16 $g KEEL_UNUSED=1
tar -czf "$out/s26c.tgz" -C "$out" r 2>/dev/null
stamp "done"
