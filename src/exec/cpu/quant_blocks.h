// GGML block layouts of the quantized weight types keel computes with, the scalar
// dequantizer (formats' reference, which the SIMD kernels are tested against), and the 8-bit
// activation blocks that the integer dot products consume (as llama.cpp does: the
// activation row is quantized once per matmul, in blocks of 32 with one float scale).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace keel::cpu {

struct BlockQ8_0 {  // 34 bytes: x = d * qs
  std::uint16_t d;  // f16
  std::int8_t qs[32];
};
struct BlockQ4_0 {  // 18 bytes: x[j] = d * ((qs[j] & 15) - 8), x[j+16] = d * ((qs[j] >> 4) - 8)
  std::uint16_t d;  // f16
  std::uint8_t qs[16];
};
struct BlockQ4_K {        // 144 bytes: 8 sub-blocks of 32 with 6-bit scales and mins
  std::uint16_t d, dmin;  // f16
  std::uint8_t scales[12];
  std::uint8_t qs[128];
};
struct BlockQ5_K {        // 176 bytes: Q4_K plus a fifth bit per element in qh
  std::uint16_t d, dmin;  // f16
  std::uint8_t scales[12];
  std::uint8_t qh[32];
  std::uint8_t qs[128];
};
struct BlockQ6_K {  // 210 bytes: 16 sub-blocks of 16 with int8 scales
  std::uint8_t ql[128];
  std::uint8_t qh[64];
  std::int8_t scales[16];
  std::uint16_t d;  // f16
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// An activation block: 32 int8 values, their float scale, and the sum of the values
// (Q4_0 multiplies unsigned nibbles and subtracts 8 * sum once per block).
struct BlockQ8Act {
  float d;
  std::int32_t sum;
  std::int8_t qs[32];
};

// Dequantizes n elements (a multiple of the type's block size) of row `src` into `dst`.
// Works for every weight dtype (F32/F16/BF16 included); forwards to formats/quant.h.
void dequantize_row(DType type, const std::byte *src, float *dst, std::int64_t n);

// Quantizes n floats (a multiple of 32) into n / 32 activation blocks: d = max|x| / 127,
// q = round-half-away(x / d).
void quantize_row_q8_act(const float *src, BlockQ8Act *dst, std::int64_t n);

}  // namespace keel::cpu
