#!/usr/bin/env bash
# Session 19, call D (the last of its device time): the whole CUDA suite after s19c's fixes
# (MLA fixtures on both paths, the low-bit MoE bound at E / k, DSA's faster indexer), the
# 128k GLM-5 step with DSA against dense (profiled), the quantized GEMM's bound (8B Q4_K_M
# at 16..256 seqs with the GEMM to 256 rows against none), the GEMM per q4_k shape, and
# where a DeepSeek-V3 decode step's time goes.
#   here:  KEEL_DEVCARRY=.devcarry-s19 scripts/device/package.sh build-cuda tests/keel_test_cuda \
#            bench/cuda_bench bench/cuda_mla_bench bench/cuda_qgemv_bench
set -uo pipefail
carry=.devcarry-s19; out=${OUT:-/tmp/o}; budget=${BUDGET:-320}
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "all tests"
timeout "$(cap 150)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 16
grep -B3 -A8 'Failure' "$out/all.log" | head -30
grep -E 'vs transformers|over 0.2|: \|logprob error' "$out/all.log" | head -24
dec() {  # label, cap, flags
  stamp "$1"
  timeout "$(cap $2)" "$B/cuda_bench" --no-long-prefill --decode-steps 32 $3 >"$out/$1.log" 2>&1
  echo "exit $?"; grep -E '^\| (8b|glm|deep)|per step' "$out/$1.log" | grep -vE 'prefill' | head -8
}
dec glm5_128k 40 "--model glm-5 --layers 3 --context 131072 --decode-steps 8 --profile"
stamp "dsa indexer alone"
timeout "$(cap 25)" "$B/cuda_mla_bench" --model glm-5 --topk 2048 --contexts 131072 --queries 1,8 --bw 4.8e12 \
  >"$out/dsa_alone.log" 2>&1; echo "exit $?"; tail -8 "$out/dsa_alone.log"
dec q4_deq 70 "--model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --keep-quantized on --seqs 16,32,64,128,256 --qgemm-max-m 0"
dec q4_gemm 50 "--model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --keep-quantized on --seqs 16,32,64,128,256 --qgemm-max-m 256"
stamp "qgemm q4_k shapes"
timeout "$(cap 30)" "$B/cuda_qgemv_bench" --formats q4_k --m 16,32,64,128 --kernels gemm,deq \
  >"$out/qgemm_q4k.log" 2>&1; echo "exit $?"; grep -E '^\| q4_k' "$out/qgemm_q4k.log" | grep -E '\| (gemm|deq) +\| +0 ' | head -24
dec dsv3_profile 40 "--model deepseek-v3 --layers 5 --seqs 1 --profile"
stamp done
