// MXFP4 (OCP microscaling FP4): blocks of 32 e2m1 values sharing one e8m0 scale.
//
// keel's in-memory form (DType::kMXFP4) is GGML's block (GGUF type 39), 17 bytes:
//   u8 e;          scale 2^(e - 127) (e8m0; 255 is NaN)
//   u8 qs[16];     byte j: low nibble = element j, high nibble = element j + 16
// An e2m1 code is s|e1 e0|m: 0, 0.5, 1, 1.5, 2, 3, 4, 6, and the same negated (code 8
// is -0). Element = e2m1(code) * 2^(e - 127), an exact product in float.
//
// gpt-oss checkpoints (safetensors) store a weight W [..., rows, cols] as two tensors:
//   <name>_blocks u8 [..., rows, cols / 32, 16]: byte j: low nibble = element 2j,
//                                                high nibble = element 2j + 1
//   <name>_scales u8 [..., rows, cols / 32]:     e8m0 per block
// They are repacked into GGML blocks when loaded (repack_gpt_oss_mxfp4).
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel {

constexpr int kMxfp4BlockElems = 32;
constexpr int kMxfp4BlockBytes = 17;

// The value of a 4-bit e2m1 code (0..15), by the format's definition.
float e2m1_to_float(std::uint8_t code);
// 2^(e - 127) for e < 255; NaN for 255.
float e8m0_to_float(std::uint8_t e);

// n elements (a multiple of 32) of GGML MXFP4 blocks to f32.
void dequantize_mxfp4(const std::byte *src, float *dst, std::int64_t n);
// n floats (a multiple of 32) to GGML MXFP4 blocks: per block the scale is the power of
// two that brings max |x| to at most 6 (round to nearest code, ties to the even code).
void quantize_mxfp4(const float *src, std::byte *dst, std::int64_t n);

// `blocks` GGML blocks from the gpt-oss form: nibbles [blocks][16] (interleaved order)
// and scales [blocks]; and back.
void repack_gpt_oss_mxfp4(const std::uint8_t *nibbles, const std::uint8_t *scales, std::byte *dst,
                          std::int64_t blocks);
void unpack_gpt_oss_mxfp4(const std::byte *src, std::uint8_t *nibbles, std::uint8_t *scales,
                          std::int64_t blocks);

}  // namespace keel
