// Element types of weights and activations, including GGML block-quantized ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace keel {

enum class DType : std::uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // blocks of 32: f16 scale + 32 x int8              (34 bytes)
  kQ4_0,  // blocks of 32: f16 scale + 16 bytes of nibbles    (18 bytes)
  kQ4_K,  // super-blocks of 256                             (144 bytes)
  kQ5_K,  // super-blocks of 256                             (176 bytes)
  kQ6_K,  // super-blocks of 256                             (210 bytes)
  kI32,
  kI8,
  kMXFP4,  // blocks of 32: e8m0 scale byte + 16 bytes of e2m1 nibbles (17 bytes)
  kF8_E4M3,  // FP8 e4m3fn, one byte; its scales travel in TensorView::scale
};

struct DTypeInfo {
  std::string_view name;
  std::int64_t block_elems;  // elements per block (1 for plain types)
  std::int64_t block_bytes;  // bytes per block
};

constexpr DTypeInfo dtype_info(DType t) {
  switch (t) {
    case DType::kF32: return {"f32", 1, 4};
    case DType::kF16: return {"f16", 1, 2};
    case DType::kBF16: return {"bf16", 1, 2};
    case DType::kQ8_0: return {"q8_0", 32, 34};
    case DType::kQ4_0: return {"q4_0", 32, 18};
    case DType::kQ4_K: return {"q4_k", 256, 144};
    case DType::kQ5_K: return {"q5_k", 256, 176};
    case DType::kQ6_K: return {"q6_k", 256, 210};
    case DType::kI32: return {"i32", 1, 4};
    case DType::kI8: return {"i8", 1, 1};
    case DType::kMXFP4: return {"mxfp4", 32, 17};
    case DType::kF8_E4M3: return {"fp8", 1, 1};
  }
  return {"?", 1, 1};
}

constexpr std::string_view dtype_name(DType t) { return dtype_info(t).name; }
constexpr bool dtype_is_quantized(DType t) { return dtype_info(t).block_elems > 1; }

// Bytes needed for n elements; n must be a multiple of the block size for block types.
constexpr std::int64_t dtype_bytes(DType t, std::int64_t n) {
  const auto info = dtype_info(t);
  return n / info.block_elems * info.block_bytes;
}

}  // namespace keel
