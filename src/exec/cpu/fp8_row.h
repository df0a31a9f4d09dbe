// FP8 e4m3 weight rows to float32 for the CPU linear layer (linear.cpp runs them through its
// float32 tiles, as it does K-quant rows). The values equal formats/quant.h's reference
// (dequantize_fp8_row) bit for bit on every path: e4m3 converts to f32 exactly, and the
// scale is applied by one f32 multiply.
#pragma once

#include <cstdint>

namespace keel::cpu {

// dst[k] = e4m3(src[k]) * scales[k / block_cols], k < n. `simd`: use AVX2 + F16C when
// this CPU has them (the caller's ISA choice); the result is the same either way.
void fp8_row_to_f32(const std::uint8_t *src, float *dst, std::int64_t n, const float *scales,
                    std::int64_t block_cols, bool simd);

}  // namespace keel::cpu
