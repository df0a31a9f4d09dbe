#!/usr/bin/env bash
# Session 26, call D (issue 29): the landed tree's quantized-linear tests (the bf16 and integer
# GEMMs, run_linear, the fused runner, GGUF models and experts) on the GPU.
#   here:  KEEL_DEVCARRY=.devcarry-s26d scripts/device/package.sh build-cuda tests/keel_test_cuda
#   carry: .devcarry-s26d
set -uo pipefail
carry=.devcarry-s26d; out=${OUT:-/tmp/o}; budget=${BUDGET:-200}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
stamp "tests"
timeout "$(cap 180)" "$B/keel_test_cuda" \
  --gtest_filter='*Qgemm*:QuantLinear.*:CudaFusedRunner.*:*Gguf*:*gguf*:CudaMoeQuant.*:*Qgemv*' \
  >"$out/tests.log" 2>&1
echo "exit $?"
summary "$out/tests.log" 8
grep -B3 -A10 'Failure' "$out/tests.log" | grep -vE '^\s*$' | head -30
stamp "done"
