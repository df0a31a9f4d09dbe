#!/usr/bin/env bash
# Session 20, call C (everything of the unrun call A, and call B's EAGLE-3 training, in one call;
# device starts being scarce).
#   t = 0, side by side: the default model's EAGLE-3 head training (issue 30; a small
#   model, it does not disturb correctness tests), `keel make-model` of the DeepSeek-V3
#   shape cut to 4 layers (3 dense + 1 MoE, bf16), and the whole CUDA suite (first GPU run
#   of ExpertFormat, the GEMM bound 64, CudaKernelChoices, the shared MLA test fixture);
#   then, the GPU to itself: the DeepSeek-V3 shape served with default flags (1 and 64
#   streams, 2k-token prompts; issue 32) beside cuda_bench in-process (profiled), GLM-5's
#   128k step with DSA against dense (profiled), gpt-oss-20b (MXFP4) served at 64 / 256
#   streams (issue 29) while time is left.
#   here:  KEEL_DEVCARRY=.devcarry-s20 scripts/device/package.sh build-cuda keel \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_mla_bench
#   carry: .devcarry-s20 .devcarry-data/default_model/train.txt.xz
# Ran on an H100 in session 21 (2026-12-07). Only 8 files of $OUT came back: the trained
# head in $OUT/eagle3 did not (a second call retrained it and sent one tar back). Put what
# must come back into one archive.
set -uo pipefail
carry=.devcarry-s20; out=${OUT:-/tmp/o}; budget=${BUDGET:-585}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
mkdir -p /tmp/s20

stamp "background: EAGLE-3 training; make-model deepseek-v3 4 layers"
(timeout 240 bash scripts/device/s20_eagle3.sh --train-seconds 120 --deadline-seconds 215 \
  >"$out/eagle3.log" 2>&1; echo "eagle3 exit $?" >>"$out/eagle3.log") &
eagle=$!
ds=/tmp/s20/deepseek-v3-4l
(timeout 200 "$B/keel" make-model --arch deepseek_v3 --shape deepseek-v3 --layers 4 --out "$ds" \
  >"$out/make_ds.log" 2>&1; echo "make-model exit $?" >>"$out/make_ds.log") &
mk=$!

stamp "all tests"
timeout "$(cap 200)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 16
grep -B3 -A8 'Failure' "$out/all.log" | grep -vE '^\s*$' | head -40
grep -E 'vs transformers|over 0.2|: \|logprob error' "$out/all.log" | head -12

wait $mk; tail -2 "$out/make_ds.log"

# serve MODEL_DIR LABEL VOCAB "STREAMS:INPUT:REQUESTS ..."
serve() {
  local model=$1 label=$2 vocab=$3 loads=$4 url=""
  stamp "served $label: keel serve --device cuda (default flags)"
  "$B/keel" serve --device cuda --port 0 "$model" >"$out/serve_$label.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  for _ in $(seq 1 1200); do
    url=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$out/serve_$label.log" | head -1)
    [ -n "$url" ] && break
    sleep 0.1
  done
  [ -n "$url" ] || { tail -20 "$out/serve_$label.log"; kill $pid; return; }
  local id
  id=$(basename "$model")
  for l in $loads; do
    IFS=: read -r streams input reqs <<<"$l"
    stamp "served $label: $streams streams, $reqs requests, $input in / 128 out"
    timeout "$(cap 120)" python3 "$here/serve_load.py" "$url" "$id" --streams "$streams" \
      --input "$input" --output 128 --requests "$reqs" --vocab "$vocab" --warmup \
      | tee "$out/served_${label}_$streams.log" | tail -6
  done
  curl -s "$url/api/status" >"$out/status_$label.json"
  kill $pid; wait $pid 2>/dev/null
}

wait $eagle; stamp "EAGLE-3 done"; tail -25 "$out/eagle3.log"

# The trained head served on CUDA (issue 30, first GPU run of CudaEagle3Head): the default
# model, batch 1, held-out English, off / eagle3 (adaptive) / eagle3 raw.
port=8700
spec() {  # label, keel serve args...
  local label=$1; shift
  port=$((port + 1))
  "$B/keel" serve --device cuda --port $port "$@" models/default >"$out/serve-$label.log" 2>&1 &
  local pid=$!
  pids+=($pid)
  for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.2; done
  stamp "default model served on CUDA, batch 1: $label"
  timeout "$(cap 40)" python3 bench/spec_served.py --url "http://127.0.0.1:$port" --label "$label" \
    --num-prompts 12 --json "$out/spec_$label.json" | python3 -c "import json,sys; d=json.load(sys.stdin); print({k: d.get(k) for k in ('label', 'decode_tok_s_median', 'e2e_tok_s', 'verify_steps', 'acceptance_length', 'paused', 'speedup')})"
  grep -iE "error|eagle" "$out/serve-$label.log" | head -3
  kill $pid; wait $pid 2>/dev/null
}
if [ -f "$out/eagle3/model.safetensors" ]; then
  spec off
  spec eagle3 --speculative "eagle3:$out/eagle3"
  spec eagle3_raw --speculative "eagle3:$out/eagle3" --speculative-adaptive off
fi
serve "$ds" deepseek_v3_4l 129000 "1:2048:3 64:2048:64"
rm -rf "$ds"
stamp "in-process: cuda_bench deepseek-v3 4 layers, 1 and 64 seqs"
timeout "$(cap 45)" "$B/cuda_bench" --model deepseek-v3 --layers 4 --seqs 1,64 --decode-steps 16 \
  --no-long-prefill >"$out/dsv3_4l.log" 2>&1; echo "exit $?"
grep -E '^\|' "$out/dsv3_4l.log" | grep -v '^|--' | head -10
stamp "profiled"
timeout "$(cap 40)" "$B/cuda_bench" --model deepseek-v3 --layers 4 --seqs 64 --decode-steps 8 \
  --no-long-prefill --profile >"$out/dsv3_4l_profile.log" 2>&1; echo "exit $?"
grep -E '^\|' "$out/dsv3_4l_profile.log" | grep -v '^|--' | head -12

stamp "MLA prefill on the simple kernel (the chunked split path's A/B; the rows above are chunks)"
timeout "$(cap 40)" "$B/cuda_bench" --model deepseek-v3 --layers 4 --seqs 64 --decode-steps 4 \
  --no-long-prefill --mla-prefill simple --profile >"$out/dsv3_4l_simple.log" 2>&1; echo "exit $?"
grep -E '^\|' "$out/dsv3_4l_simple.log" | grep -v '^|--' | head -8

stamp "DSA tensor-core scores (first GPU run): tests, then alone against the fp32 kernel"
timeout "$(cap 40)" "$B/keel_test_cuda" --gtest_filter='DsaScores.*:DsaTopk.*:CudaDsaVsCpu.*' \
  >"$out/dsa_tests.log" 2>&1; echo "exit $?"; summary "$out/dsa_tests.log" 8
timeout "$(cap 30)" "$B/cuda_mla_bench" --model glm-5 --topk 2048 --contexts 32768,131072 \
  --queries 1,8,64 --dsa-fp32 --bw 4.8e12 >"$out/dsa_alone.log" 2>&1; echo "exit $?"
grep -i "dsa" "$out/dsa_alone.log" | head -16
stamp "glm-5 128k, dsa (tensor-core scores) vs dense, profiled"
timeout "$(cap 40)" "$B/cuda_bench" --no-long-prefill --model glm-5 --layers 3 --context 131072 \
  --decode-steps 8 --profile --dsa-mma on >"$out/glm5_128k_mma.log" 2>&1; echo "exit $?"
grep -vE '^#|^\|--' "$out/glm5_128k_mma.log" | tail -14
stamp "glm-5 128k, dsa vs dense, profiled"
timeout "$(cap 40)" "$B/cuda_bench" --no-long-prefill --model glm-5 --layers 3 --context 131072 \
  --decode-steps 8 --profile >"$out/glm5_128k.log" 2>&1; echo "exit $?"
grep -vE '^#|^\|--' "$out/glm5_128k.log" | tail -14

m=/tmp/s20/gpt-oss-20b
stamp "make-model gpt-oss-20b (MXFP4 experts)"
timeout "$(cap 60)" "$B/keel" make-model --arch gpt_oss --shape gpt-oss-20b --dtype mxfp4 \
  --out "$m" 2>&1 | tail -1
serve "$m" gpt_oss_20b 200000 "64:512:128 256:512:512"
stamp done
