// Small helpers shared by the files of CudaModelRunner (cuda_runner_*.cpp); not an
// interface of the backend.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_model_runner.h"

namespace keel::cuda::runner_detail {

// Bytes of `elems` bf16 values (also the byte offset of element `elems` in a bf16 matrix).
inline std::size_t bf16_bytes(std::int64_t elems) {
  return static_cast<std::size_t>(elems) * sizeof(bf16);
}

inline Error bad_batch(const std::string &why) {
  return Error(ErrorCode::kInvalidArgument, "forward batch: " + why);
}

// The current device's memory (cudaMemGetInfo); free_at_open left 0.
inline DeviceMemory device_memory() {
  std::size_t free_b = 0, total_b = 0;
  KEEL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  DeviceMemory m;
  m.total = static_cast<std::int64_t>(total_b);
  m.free_now = static_cast<std::int64_t>(free_b);
  return m;
}

// The [E] vector a MoE router reads beside its weight, if any: GLM-4.5's
// e_score_correction_bias (sigmoid scoring: it chooses experts) or gpt-oss's logit bias.
inline bool moe_has_router_bias(const MoeConfig &m) {
  return m.scoring == MoeConfig::Scoring::kSigmoid || m.router_bias;
}
inline std::string moe_router_bias_tensor(const MoeConfig &m, std::int64_t layer) {
  return m.scoring == MoeConfig::Scoring::kSigmoid ? moe_router_bias_name(m, layer)
                                                   : moe_router_logit_bias_name(m, layer);
}

}  // namespace keel::cuda::runner_detail
