// A read-only view of a tensor that lives elsewhere (usually a memory-mapped file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace keel {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  // Row-major, outermost first (PyTorch / safetensors order). For a linear weight
  // this is [out_features, in_features]. GGUF readers reverse GGML's ne[] into this order.
  std::vector<std::int64_t> shape;
  const std::byte *data = nullptr;
  std::size_t nbytes = 0;

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  std::int64_t rows() const { return shape.empty() ? 1 : numel() / shape.back(); }
  std::int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
};

}  // namespace keel
