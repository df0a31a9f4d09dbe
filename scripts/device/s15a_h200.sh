#!/usr/bin/env bash
# Session 15's first device call: the merged tree's new CUDA tests (MLA, graphs incl. verify
# steps, speculative engine), the verify-step bench, a per-phase profile of 8B Q4_K_M decode
# kept quantized next to bf16 (where batch-1 time goes, issue 29), and the whole CUDA suite.
#   here:  KEEL_DEVCARRY=.devcarry-s15 scripts/device/package.sh build-cuda \
#            tests/keel_test_cuda bench/cuda_bench
#          (cd .devcarry-s15 && tar -cf - bin lib | xz -9 -T2 >pack.tar.xz && rm -r bin lib)
#   there: (carry .devcarry-s15) bash scripts/device/s15a_h200.sh
set -uo pipefail
carry=.devcarry-s15; out=${OUT:-/tmp/o}; budget=585
source scripts/device/budget_lib.sh
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
stamp "new tests"
timeout "$(cap 150)" "$B/keel_test_cuda" --gtest_filter='*MlaKernel*:*CudaMla*:CudaGraphs.*:CudaEngineSpeculative*' >"$out/new.log" 2>&1; echo "exit $?"
summary "$out/new.log" 12
grep -E -A12 'Failure' "$out/new.log" | head -60
stamp "verify bench"
timeout "$(cap 80)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 64 --seqs 8,64 --verify 3 >"$out/bench.log" 2>&1; echo "exit $?"
grep -E '^\| 8b|^#' "$out/bench.log" | head -30
stamp "q4_k_m profile"
timeout "$(cap 110)" "$B/cuda_bench" --model 8b --make-gguf /tmp/q4km.gguf --gguf-dtype q4_k_m --no-long-prefill --decode-steps 32 --seqs 1,8 >"$out/q4.log" 2>&1; echo "exit $?"
timeout "$(cap 60)" "$B/cuda_bench" --model 8b --weights /tmp/q4km.gguf --no-long-prefill --decode-steps 32 --seqs 1,8 --profile >"$out/q4p.log" 2>&1; echo "exit $?"
timeout "$(cap 60)" "$B/cuda_bench" --model 8b --no-long-prefill --decode-steps 32 --seqs 1,8 --profile >"$out/bfp.log" 2>&1; echo "exit $?"
grep -E '^\| 8b|per step|^# 8b' "$out/q4.log" "$out/q4p.log" "$out/bfp.log"
stamp "all"
timeout "$(cap 240)" "$B/keel_test_cuda" >"$out/all.log" 2>&1; echo "exit $?"
summary "$out/all.log" 20
stamp done
