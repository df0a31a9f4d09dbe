#!/usr/bin/env bash
# Session 15's last device call: the whole CUDA suite on the merged tree (draft models, MTP
# on MLA, the new k_qgemv), and 8B Q4_K_M decode as a check of the kept-quantized path.
#   here:  KEEL_DEVCARRY=.devcarry-s15 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench
#   there: (carry .devcarry-s15) bash scripts/device/s15d_h200.sh
set -uo pipefail
carry=.devcarry-s15; out=${OUT:-/tmp/o}; budget=300
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader
stamp "all"
timeout "$(cap 200)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 14
stamp "q4_k_m decode"
timeout "$(cap 80)" "$B/cuda_bench" --model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --no-long-prefill --decode-steps 32 --seqs 1,2,8 >"$out/q4.log" 2>&1; echo "exit $?"
grep -E '^\| 8b' "$out/q4.log"
stamp done
