// A read-only view of a tensor that lives elsewhere (usually a memory-mapped file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace keel {

// The dequantization scales of an FP8 weight (dtype kF8_E4M3, [rows, cols]): element (r, c)
// is e4m3(r, c) * data[(r / block_rows) * grid_cols + c / block_cols]. Per-tensor scales are
// one block of the whole matrix, per-channel scales blocks of one row; the block format of
// the FP8 releases (weight_scale_inv) is 128 x 128, its last blocks possibly partial.
struct TensorScale {
  const float *data = nullptr;  // f32 [grid_rows, grid_cols], owned by the view's maker
  std::int64_t grid_rows = 0, grid_cols = 0;
  std::int64_t block_rows = 0, block_cols = 0;

  bool present() const { return data != nullptr; }
  const float *row(std::int64_t r) const { return data + (r / block_rows) * grid_cols; }
};

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  // Row-major, outermost first (PyTorch / safetensors order). For a linear weight
  // this is [out_features, in_features]. GGUF readers reverse GGML's ne[] into this order.
  std::vector<std::int64_t> shape;
  const std::byte *data = nullptr;
  std::size_t nbytes = 0;
  TensorScale scale;  // FP8 weights only

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  std::int64_t rows() const { return shape.empty() ? 1 : numel() / shape.back(); }
  std::int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
};

}  // namespace keel
