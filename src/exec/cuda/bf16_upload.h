// Host tensors copied to the device as bf16, for a drafting head's weights
// (cuda_eagle3_head.h, cuda_mtp_layer.h): any dtype dequantize_rows reads (f32, f16, bf16,
// FP8 with its scales, GGUF blocks), each value rounded once, through the context's h2d
// stream a bounded chunk at a time (the staging is reused, so each chunk waits for its
// copy).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor_view.h"
#include "exec/cuda/cuda_context.h"
#include "exec/cuda/cuda_resources.h"

namespace keel::cuda {

class Bf16Upload {
 public:
  explicit Bf16Upload(CudaContext &ctx) : ctx_(ctx) {}
  // The matrix `t` ([rows, cols]) at element `at` of `dst`.
  void put(const TensorView &t, const DeviceBuffer &dst, std::int64_t at = 0);
  // `v` at element `at` of `dst`.
  void put(std::span<const float> v, const DeviceBuffer &dst, std::int64_t at = 0);
  // The compute stream waits for every copy (the next step's kernels see the weights).
  void finish();

 private:
  void send(const DeviceBuffer &dst, std::int64_t at);  // staged_, then wait for its copy

  CudaContext &ctx_;
  std::vector<std::uint16_t> staged_;
  Event copied_;
};

}  // namespace keel::cuda
