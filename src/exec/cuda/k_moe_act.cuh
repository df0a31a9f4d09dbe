// The routed experts' activation, shared by the gather-GEMVs (k_moe_experts.cu), the
// grouped rows' activation kernel and the fused decode kernels (k_moe_decode.cu):
// SwiGLU, or gpt-oss's clamped variant when MoeExpertAct::limit > 0. Both take the
// gate and up projections in f32, their biases already added.
#pragma once

#include "exec/cuda/k_moe.h"

namespace keel::cuda {

__device__ __forceinline__ float moe_expert_act(float g, float u, const MoeExpertAct &a) {
  if (a.limit > 0.0f) {
    // gpt-oss: gate = min(gate, limit); up = clamp(up, -limit, limit);
    // out = (up + 1) * gate * sigmoid(alpha * gate).
    g = fminf(g, a.limit);
    u = fminf(fmaxf(u, -a.limit), a.limit);
    return (u + 1.0f) * (g / (1.0f + __expf(-a.alpha * g)));
  }
  return g / (1.0f + __expf(-g)) * u;
}

}  // namespace keel::cuda
