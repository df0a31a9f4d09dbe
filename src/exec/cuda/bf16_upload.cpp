#include "exec/cuda/bf16_upload.h"

#include <algorithm>

#include "core/half.h"
#include "exec/cuda/cuda_check.h"
#include "formats/quant.h"

namespace keel::cuda {

void Bf16Upload::send(const DeviceBuffer &dst, std::int64_t at) {
  KEEL_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::uint16_t *>(dst.data()) + at, staged_.data(),
                                  staged_.size() * sizeof(std::uint16_t), cudaMemcpyHostToDevice,
                                  ctx_.copy_h2d().get("cudaMemcpyAsync")));
  copied_.record(ctx_.copy_h2d());  // staged_ is refilled next: wait for the copy to read it
  copied_.wait(ctx_.wait_timeout(), "weight upload");
}

void Bf16Upload::put(const TensorView &t, const DeviceBuffer &dst, std::int64_t at) {
  const std::int64_t rows = t.shape[0], cols = t.shape[1];
  const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t(1) << 22) / cols);
  std::vector<float> f;
  for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const std::int64_t nr = std::min(chunk, rows - r0);
    f.resize(static_cast<std::size_t>(nr * cols));
    dequantize_rows(t, r0, nr, f.data());
    staged_.resize(f.size());
    for (std::size_t i = 0; i < f.size(); ++i) staged_[i] = f32_to_bf16(f[i]);
    send(dst, at + r0 * cols);
  }
}

void Bf16Upload::put(std::span<const float> v, const DeviceBuffer &dst, std::int64_t at) {
  staged_.resize(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) staged_[i] = f32_to_bf16(v[i]);
  send(dst, at);
}

void Bf16Upload::finish() {
  copied_.record(ctx_.copy_h2d());
  copied_.make_wait(ctx_.compute());
  copied_.wait(ctx_.wait_timeout(), "weight upload");
}

}  // namespace keel::cuda
