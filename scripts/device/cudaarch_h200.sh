#!/usr/bin/env bash
# Issue #19 on the GPU machine: GLM-4.5 (glm4_moe) and gpt-oss (gpt_oss) on the CUDA
# runner. The kernel tests (grouped sigmoid and top-k softmax routing vs the CPU on ties,
# partial rotary vs cpu::apply_rope, the bf16 add, attention sinks on the general, decode
# and flash kernels with and without windows, split-K per window; a dense model with
# gpt-oss's attention -- alternating windows, sinks, q/k/v/o biases -- and partial rotary
# against the CPU runner on both attention paths), the whole tiny models
# against transformers' float64 fixtures and against the CPU runner (alone and batched
# with 31 others, graphs on, GEMV and GEMM expert paths), then GLM-4.5-Air-shaped bf16
# decode with 24 of its 46 layers (random weights on the device: the whole model is
# 212 GB in bf16) against the roofline of the bytes a step reads at 4.8 TB/s; with what
# is left of the budget the existing MoE, attention and runner tests (nothing they check
# may move) and memcheck on the new kernels. About 90 s.
#
# The gpt_oss model cases need the cudaexperts branch too (expert biases and the clamped
# SwiGLU on the device) and the two refusals of them in CudaModelRunner::validate_config
# removed: until then they fail at load naming what is missing.
#
#   there:  bash scripts/device/cudaarch_h200.sh [budget-seconds]   (carry .devcarry)
set -uo pipefail
carry=${KEEL_CARRY:-.devcarry}
out=${OUT:-/tmp/keel-cudaarch}
budget=${1:-95}
source "$(dirname "$0")/budget_lib.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

stamp "kernel tests: routing rules, partial rope, add, sinks, split-K per window"
timeout "$(cap 20)" "$B/keel_test_cuda" \
  --gtest_filter='*MoeRouteGroupedSigmoid*:*MoeRouteTopkSoftmax*:MoeRouteRules.*:CudaRopePartial.*:CudaAddBf16.*:CudaAttention.Sinks*:CudaAttentionPlan.*:SlidingWindowModel.*GptOss*' \
  >"$out/tests_kernels.log" 2>&1
echo "exit $?"
summary "$out/tests_kernels.log" 12
grep -E -A8 'Failure' "$out/tests_kernels.log" | head -30

stamp "models: glm4_moe / gpt_oss vs transformers and vs the CPU runner"
timeout "$(cap 30)" "$B/keel_test_cuda" --gtest_filter='*CudaMoeArch*' >"$out/tests_models.log" 2>&1
echo "exit $?"
summary "$out/tests_models.log" 16
grep -E '^cuda (glm4|gpt)' "$out/tests_models.log"
grep -E -A8 'Failure' "$out/tests_models.log" | head -40

stamp "cuda_bench glm-4.5-air, 24 layers, decode 1 and 32 sequences"
timeout "$(cap 25)" "$B/cuda_bench" --model glm-4.5-air --layers 24 --bw 4.8e12 --seqs 32 \
  --decode-steps 32 --no-long-prefill >"$out/bench_glm_air.log" 2>&1
echo "exit $?"
grep -E '^#|^\||cuda_bench' "$out/bench_glm_air.log" | head -30

stamp "regressions (what is left of the budget): MoE, attention, windows, runner, graphs"
timeout "$(cap 40)" "$B/keel_test_cuda" \
  --gtest_filter='*Moe*:CudaAttention.*:SlidingWindowModel.*:CudaRunner.*:CudaGraphs.*:CudaFusedRunner.*:Fixtures/CudaVsTransformers.*:-*CudaMoeArch*:*SkipsKeyTiles*' \
  >"$out/tests_regress.log" 2>&1
echo "exit $? (124: the budget ran out first)"
summary "$out/tests_regress.log" 12

sanitize memcheck 'Shapes/MoeRouteGroupedSigmoid.*:Shapes/MoeRouteTopkSoftmax.*:CudaAttention.Sinks*:Models/CudaMoeArchVsCpu.*glm4_moe_mixed' 20
stamp done
