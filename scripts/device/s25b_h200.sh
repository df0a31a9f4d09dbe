#!/usr/bin/env bash
# Session 25, call B (issue 29): the streamed dp4a GEMV as the default for Q6_K / Q8_0 / Q4_0
# (CudaKernelChoices::qgemv_stream_stages = 2): the tests again with that default, the GEMV
# alone at M = 1-8 for the streamed formats (the runner streams them at every dp4a M), 8B
# Q4_K_M and Q8_0 decode in-process with the default and with --qgemv-stream-stages 0, and 8B
# Q4_K_M served by `keel serve` (kept quantized, KEEL_QUANTIZED_WEIGHTS=on, and default flags)
# at one stream, 512 in / 128 out.
#   here:  KEEL_DEVCARRY=.devcarry-s25 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_qgemv_bench keel
#   carry: .devcarry-s25
set -uo pipefail
carry=.devcarry-s25; out=${OUT:-/tmp/o}; budget=${BUDGET:-570}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
mkdir -p "$out/r"
r=$out/r

if [ "${SERVED_ONLY:-0}" != 1 ]; then
stamp "tests: the quantized GEMV, run_linear, the fused runner, GGUF models"
timeout "$(cap 150)" "$B/keel_test_cuda" \
  --gtest_filter='*Qgemv*:QuantLinear.*:CudaFusedRunner.*:*Gguf*' >"$r/tests.log" 2>&1
echo "exit $?"
summary "$r/tests.log" 12
grep -B3 -A12 'Failure' "$r/tests.log" | grep -vE '^\s*$' | head -40

stamp "k_qgemv alone, M = 1-8: register vs streamed (2 slots) for the streamed formats"
timeout "$(cap 90)" "$B/cuda_qgemv_bench" --formats q6_k,q8_0,q4_0 --m 1,2,3,4,5,6,7,8 --waves 0 \
  --kernels dp4a,dp4s --stages 2 >"$r/qgemv.log" 2>&1; echo "exit $?"

for dt in q4_k_m q8_0; do
  g=/tmp/$dt.gguf
  for st in 2 0 2; do
    stamp "8B $dt decode 1 / 2 / 4 / 8 seqs, --qgemv-stream-stages $st"
    timeout "$(cap 120)" "$B/cuda_bench" --model 8b --make-gguf $g --gguf-dtype $dt --no-long-prefill \
      --decode-steps 64 --seqs 1,2,4,8 --qgemv-stream-stages $st >"$r/${dt}_s$st.log" 2>&1
    echo "exit $?"
    grep -E 'decode' "$r/${dt}_s$st.log" | head -5
  done
done

fi
port=18500
# HTTP through python: the carried libcurl (for keel) breaks the system curl under
# LD_LIBRARY_PATH.
up() { python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null; }
serve_one() {  # label, gguf, then env assignments
  local label=$1 g=$2
  shift 2
  port=$((port + 1))
  env "$@" "$B/keel" serve --device cuda --port $port $g >"$r/serve_$label.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  for _ in $(seq 1 600); do up "http://127.0.0.1:$port/health" && break; sleep 0.2; done
  local id
  id=$(basename "$g" .gguf)
  stamp "served 8B $id ($label): 1 stream, 16 requests, 512 in / 128 out"
  timeout "$(cap 120)" python3 "$here/serve_load.py" "http://127.0.0.1:$port" "$id" --streams 1 \
    --input 512 --output 128 --requests 16 --vocab 128000 --warmup | tee "$r/served_$label.log" | head -8
  grep -iE 'weights|quantized|bf16' "$r/serve_$label.log" | head -3
  kill $pid
  wait $pid 2>/dev/null
}
if [ "${SERVED_ONLY:-0}" = 1 ]; then
  for dt in q4_k_m q8_0; do
    [ -f /tmp/$dt.gguf ] || timeout "$(cap 60)" "$B/cuda_bench" --model 8b --make-gguf /tmp/$dt.gguf \
      --gguf-dtype $dt --no-long-prefill --decode-steps 8 --seqs 1 >/dev/null 2>&1
  done
fi
serve_one q4km_quantized /tmp/q4_k_m.gguf KEEL_QUANTIZED_WEIGHTS=on
serve_one q4km_default /tmp/q4_k_m.gguf KEEL_UNUSED=1
serve_one q80_quantized /tmp/q8_0.gguf KEEL_QUANTIZED_WEIGHTS=on
tar -czf "$out/s25b.tgz" -C "$out" r 2>/dev/null
stamp "done"
