#!/usr/bin/env bash
# Session 26, call B (issue 29): the dequantizing bf16 GEMM with its column tiles a template
# parameter and its weights staged through shared memory by cp.async (`gemm16`) or loaded into
# registers (`gemm16r`); as before a template
# parameter (no branch between a tile's shared loads and MMAs): its tests, the GEMMs alone on
# the 8B shapes, 8B Q4_K_M kept quantized at 16 / 64 seqs with the bf16 GEMM on and off, 8B
# Q4_K_M served at 64 streams kept quantized and with default flags; then the Qwen3-30B-A3B
# Q4_K_M A/B of the GGUF expert slots (session 25's call D, whose make-model lacked --arch).
#   here:  KEEL_DEVCARRY=.devcarry-s26b scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_qgemv_bench keel  (then xz -9)
#   carry: .devcarry-s26b
set -uo pipefail
carry=.devcarry-s26b; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r
stamp "tests: the bf16 GEMM, the integer GEMM, run_linear"
timeout "$(cap 120)" "$B/keel_test_cuda" --gtest_filter='*Qgemm*:QuantLinear.*' >"$r/tests.log" 2>&1
echo "exit $?"
summary "$r/tests.log" 8
grep -B3 -A12 'Failure' "$r/tests.log" | grep -vE '^\s*$' | head -30

stamp "GEMMs alone, q4_k / q6_k, M = 16 / 32 / 64"
timeout "$(cap 100)" "$B/cuda_qgemv_bench" --formats q4_k,q6_k --m 16,32,64 \
  --kernels gemm,gemm16,gemm16r,bf16 --k-groups 0 --splits 0 >"$r/gemm.log" 2>&1; echo "exit $?"
grep -E '^\|' "$r/gemm.log" | grep -E 'gemm16|bf16 \|' | head -80

g=/tmp/q4_k_m.gguf
for on in on off; do
  stamp "8B q4_k_m decode 1 / 16 / 64 seqs, --qgemm-bf16 $on"
  timeout "$(cap 150)" "$B/cuda_bench" --model 8b --make-gguf $g --gguf-dtype q4_k_m --keep-quantized on \
    --no-long-prefill --decode-steps 32 --seqs 1,16,64 --qgemm-bf16 $on >"$r/q4km_$on.log" 2>&1
  echo "exit $?"
  grep -E 'decode' "$r/q4km_$on.log" | head -4
done

q=/tmp/q3moe.gguf
stamp "make-model qwen3_moe qwen3-30b-a3b q4_k_m, 8 layers"
timeout "$(cap 150)" "$B/keel" make-model --arch qwen3_moe --shape qwen3-30b-a3b --layers 8 \
  --dtype q4_k_m --format gguf --out $q 2>&1 | tail -1
for on in off on; do
  stamp "qwen3-30b-a3b q4_k_m (8 layers) decode 1 / 4 seqs: --moe-gguf-qgemv $on"
  timeout "$(cap 60)" "$B/cuda_bench" --model qwen3-30b-a3b --weights $q --keep-quantized on \
    --no-long-prefill --decode-steps 32 --seqs 1,4 --moe-gguf-qgemv $on >"$r/q3_$on.log" 2>&1
  echo "exit $?"
  grep -E 'decode|error|Error' "$r/q3_$on.log" | head -4
done

port=18600
# HTTP through python: the carried libcurl (for keel) breaks the system curl.
up() { python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null; }
serve_one() {  # label, streams, gguf, then env assignments
  local label=$1 streams=$2 g=$3
  shift 3
  port=$((port + 1))
  env "$@" "$B/keel" serve --device cuda --port $port $g >"$r/serve_$label.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  for _ in $(seq 1 600); do up "http://127.0.0.1:$port/health" && break; sleep 0.2; done
  local id
  id=$(basename "$g" .gguf)
  stamp "served 8B $id ($label): $streams streams, 512 in / 128 out"
  timeout "$(cap 120)" python3 "$here/serve_load.py" "http://127.0.0.1:$port" "$id" \
    --streams $streams --input 512 --output 128 --requests $((streams * 2)) --vocab 128000 \
    --warmup | tee "$r/served_$label.log" | head -6
  grep -iE 'weights|quantized' "$r/serve_$label.log" | head -2
  kill $pid
  wait $pid 2>/dev/null
}
serve_one q4km_quantized_64 64 $g KEEL_QUANTIZED_WEIGHTS=on
serve_one q4km_default_64 64 $g KEEL_UNUSED=1
tar -czf "$out/s26b.tgz" -C "$out" r 2>/dev/null
stamp "done"
