// CudaModelRunner's MoE routing rule and shared expert (GLM-4.5, gpt-oss; the CPU
// definitions are exec/arch/moe_ffn.h's): the config's scoring as k_moe_route.h's rule
// with the layer's router bias, and GLM-4.5's shared expert -- a dense SwiGLU MLP of
// shared_intermediate on every token, on the dense layers' run_linear, added to the
// routed sum in proj_ as the CPU block adds it after the routed experts.
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/cuda_runner_detail.h"
#include "exec/cuda/k_moe_route.h"

namespace keel::cuda {

using runner_detail::bf16_bytes;

void CudaModelRunner::launch_moe_router(const Layer &L, std::int32_t T, const float *logits,
                                        std::int32_t *ids, float *weights) {
  const MoeConfig &m = *config_.moe;
  MoeRouteParams p;
  p.E = static_cast<int>(moe_E_);
  p.k = static_cast<int>(moe_k_);
  p.norm_topk_prob = m.norm_topk_prob;
  p.bias = L.router_bias.bytes() ? L.router_bias.as<float>() : nullptr;
  switch (m.scoring) {
    case MoeConfig::Scoring::kSoftmax:
      p.rule = MoeRouteRule::kSoftmax;
      break;
    case MoeConfig::Scoring::kSigmoid:
      p.rule = MoeRouteRule::kGroupedSigmoid;
      p.n_group = static_cast<int>(m.n_group);
      p.topk_group = static_cast<int>(m.topk_group);
      p.scale = m.routed_scaling_factor;
      break;
    case MoeConfig::Scoring::kTopkSoftmax:
      p.rule = MoeRouteRule::kTopkSoftmax;
      break;
  }
  launch_moe_route(ctx_.compute(), logits, T, p, ids, weights);
}

void CudaModelRunner::allocate_moe_shared_buffers() {
  if (!has_moe_ || config_.moe->shared_intermediate <= 0) return;
  moe_S_ = config_.moe->shared_intermediate;
  const std::int64_t T = max_tokens_;
  moe_shared_gu_ = DeviceBuffer(T * bf16_bytes(2 * moe_S_));
  moe_shared_act_ = DeviceBuffer(T * bf16_bytes(moe_S_));
  moe_shared_out_ = DeviceBuffer(T * bf16_bytes(H_));
}

void CudaModelRunner::launch_moe_shared(const Layer &L, std::int32_t T) {
  const StreamRef s = ctx_.compute();
  const LinearLayout gu_fmt{2 * moe_S_, H_, {}, {}, {}}, down_fmt{H_, moe_S_, {}, {}, {}};
  run_linear(gemm_, s, gu_fmt, L.shared_gate_up.data(), normed_.as<bf16>(), moe_shared_gu_.data(),
             false, T, nullptr);
  launch_swiglu(s, moe_shared_gu_.as<bf16>(), moe_shared_act_.as<bf16>(), T,
                static_cast<int>(moe_S_));
  run_linear(gemm_, s, down_fmt, L.shared_down.data(), moe_shared_act_.as<bf16>(),
             moe_shared_out_.data(), false, T, nullptr);
  launch_add_bf16(s, proj_.as<bf16>(), moe_shared_out_.as<bf16>(), T, static_cast<int>(H_), false);
  profiler_.mark(s, StepProfiler::kGemm);
}

}  // namespace keel::cuda
