#!/usr/bin/env bash
# Session 20, call A: the whole CUDA suite (first GPU run of the GEMM bound 64, the
# CudaKernelChoices move, the shared MLA test fixture and the cp.async header), the 128k
# GLM-5 step with DSA against dense with the multi-block top-k (profiled) and the indexer
# alone, then two served loads with default flags (scripts/device/serve_load.py):
#   - gpt-oss-20b with MXFP4 experts (issue 29): 1, 64 and 256 streams, 512 in / 128 out;
#   - the DeepSeek-V3 shape cut to 4 layers (3 dense + 1 MoE, bf16; issue 32): 1 and 64
#     streams with 2k-token prompts, beside cuda_bench on the same shape in-process.
#   here:  KEEL_DEVCARRY=.devcarry-s20 scripts/device/package.sh build-cuda keel \
#            tests/keel_test_cuda bench/cuda_bench bench/cuda_mla_bench
set -uo pipefail
carry=.devcarry-s20; out=${OUT:-/tmp/o}; budget=${BUDGET:-560}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
df -h /tmp | tail -1
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

stamp "all tests"
timeout "$(cap 150)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 16
grep -B3 -A8 'Failure' "$out/all.log" | head -30
grep -E 'vs transformers|over 0.2|: \|logprob error' "$out/all.log" | head -16

stamp "glm-5 128k, dsa vs dense, profiled"
timeout "$(cap 40)" "$B/cuda_bench" --no-long-prefill --model glm-5 --layers 3 --context 131072 \
  --decode-steps 8 --profile >"$out/glm5_128k.log" 2>&1; echo "exit $?"
grep -E '^\| glm|per step|dsa|dense|indexer|attention' "$out/glm5_128k.log" | head -24
stamp "dsa indexer alone"
timeout "$(cap 25)" "$B/cuda_mla_bench" --model glm-5 --topk 2048 --contexts 131072 --queries 1,8 \
  --bw 4.8e12 >"$out/dsa_alone.log" 2>&1; echo "exit $?"; tail -8 "$out/dsa_alone.log"

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
    timeout "$(cap 150)" python3 "$here/serve_load.py" "$url" "$id" --streams "$streams" \
      --input "$input" --output 128 --requests "$reqs" --vocab "$vocab" --warmup \
      | tee "$out/served_${label}_$streams.log" | tail -6
  done
  curl -s "$url/api/status" >"$out/status_$label.json"
  kill $pid; wait $pid 2>/dev/null
}

m=/tmp/s20/gpt-oss-20b
stamp "make-model gpt-oss-20b (MXFP4 experts)"
timeout "$(cap 120)" "$B/keel" make-model --arch gpt_oss --shape gpt-oss-20b --dtype mxfp4 \
  --out "$m" 2>&1 | tail -2
serve "$m" gpt_oss_20b 200000 "1:512:8 64:512:128 256:512:512"
rm -rf "$m"

m=/tmp/s20/deepseek-v3-4l
stamp "make-model deepseek-v3 shape, 4 layers (bf16)"
timeout "$(cap 150)" "$B/keel" make-model --arch deepseek_v3 --shape deepseek-v3 --layers 4 \
  --out "$m" 2>&1 | tail -2
serve "$m" deepseek_v3_4l 129000 "1:2048:4 64:2048:64"
rm -rf "$m"
stamp "in-process: cuda_bench deepseek-v3 4 layers"
timeout "$(cap 60)" "$B/cuda_bench" --model deepseek-v3 --layers 4 --seqs 1,64 --decode-steps 32 \
  >"$out/dsv3_4l.log" 2>&1; echo "exit $?"
grep -E '^\||roofline|prefill' "$out/dsv3_4l.log" | grep -v '^|--' | head -16
stamp "in-process: the same, profiled (where prefill and decode time goes)"
timeout "$(cap 50)" "$B/cuda_bench" --model deepseek-v3 --layers 4 --seqs 64 --decode-steps 16 \
  --no-long-prefill --profile >"$out/dsv3_4l_profile.log" 2>&1; echo "exit $?"
grep -E '^\|' "$out/dsv3_4l_profile.log" | grep -v '^|--' | head -16
stamp done
