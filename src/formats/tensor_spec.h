// A tensor a writer lays out before its bytes exist.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace keel {

struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;  // row-major, outermost first
  // The safetensors dtype name when it is not dtype's own: "U8" for the bytes of gpt-oss's
  // MXFP4 pairs (written as kI8, one byte an element).
  std::string st_dtype = {};

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
  std::uint64_t nbytes() const { return static_cast<std::uint64_t>(dtype_bytes(dtype, numel())); }
};

}  // namespace keel
