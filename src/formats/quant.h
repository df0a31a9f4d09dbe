// Reference (scalar) dequantization of every weight type keel reads, and quantizers
// for the GGML block types, bit-compatible with GGML's block layouts:
//   Q8_0  32 elems / 34 B:  f16 d, i8 qs[32]                       x = d * q
//   Q4_0  32 elems / 18 B:  f16 d, u8 qs[16] (lo nibbles: 0..15,   x = d * (q - 8)
//                           hi nibbles: 16..31)
//   Q4_K 256 elems / 144 B: f16 d, f16 dmin, u8 scales[12] (8 x 6-bit scale and min),
//                           u8 qs[128]                              x = d*sc*q - dmin*m
//   Q5_K 256 elems / 176 B: Q4_K's d, dmin, scales[12], then u8 qh[32] (the fifth bit),
//                           u8 qs[128]                     x = d*sc*(q + 16*h) - dmin*m
//   Q6_K 256 elems / 210 B: u8 ql[128], u8 qh[64], i8 scales[16], f16 d
//                                                                   x = d * sc * (q - 32)
//   MXFP4 32 elems / 17 B:  u8 e8m0, u8 qs[16] (as Q4_0)          x = e2m1(q) * 2^(e-127)
//                           (formats/mxfp4.h)
//   FP8 e4m3fn (HF safetensors F8_E4M3): 1 sign, 4 exponent (bias 7), 3 mantissa bits,
//                           no infinities, S.1111.111 is NaN, largest 448; the scales
//                           live apart (TensorView::scale):           x = e4m3 * scale
// Fast kernels live in exec/; these are the references they are tested against.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/tensor_view.h"

namespace keel {

// Converts n elements of `type` at src to f32. n must be a multiple of the block size
// (throws Error(kInvalidArgument) otherwise, kUnsupported for integer types and for FP8,
// whose values mean nothing without their scales: use dequantize_rows).
void dequantize_row(DType type, const void *src, float *dst, std::int64_t n);

// FP8 e4m3fn <-> f32. Encoding rounds to nearest even and saturates to +-448 (as
// PyTorch's float8_e4m3fn cast of a clamped value); NaN encodes as 0x7F.
float fp8_e4m3_to_float(std::uint8_t code);
std::uint8_t float_to_fp8_e4m3(float x);

// One FP8 row of n elements: dst[k] = e4m3(src[k]) * scales[k / block_cols] (f32 product).
void dequantize_fp8_row(const std::uint8_t *src, float *dst, std::int64_t n, const float *scales,
                        std::int64_t block_cols);

// Rows [row0, row0 + rows) of a 2-D tensor (any weight dtype, FP8 with its scales) as f32.
void dequantize_rows(const TensorView &t, std::int64_t row0, std::int64_t rows, float *dst);

// Encodes n f32 values (a multiple of the block size) as `type`: F32, F16, BF16,
// Q8_0, Q4_0, Q4_K, Q5_K, Q6_K or MXFP4. dst holds dtype_bytes(type, n) bytes.
void quantize_row(DType type, const float *src, void *dst, std::int64_t n);

// The whole tensor as f32 (tests, small tensors).
std::vector<float> dequantize(const TensorView &t);

}  // namespace keel
