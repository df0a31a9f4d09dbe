// MXFP4 block decoding shared by the GEMV / dequantize kernels (k_mxfp4.cu) and the
// experts' low-bit grouped GEMM (k_moe_grouped_lowbit.cu), so every path produces the same
// values bit for bit. Codes decode as twice their e2m1 value (0, 1, 2, 3, 4, 6, 8, 12:
// small integers, looked up four at a time with one byte permute), and the scale is taken
// as 2^(e - 128), so value = (2 e2m1) * 2^(e - 128) is the CPU's exact e2m1 * 2^(e - 127).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace keel::cuda::mxfp4 {

constexpr int kBlockElems = 32, kBlockBytes = 17;
// Twice the e2m1 magnitudes of codes 0..7, as bytes: {0, 1, 2, 3} and {4, 6, 8, 12}.
constexpr unsigned kLutLo = 0x03020100u, kLutHi = 0x0C080604u;

// 2^(e - 128) (NaN for e = 255); e = 0, 1 are float subnormals.
__device__ inline float e8m0_half(unsigned e) {
  if (e >= 2) return e == 255 ? __uint_as_float(0x7FC00000u) : __uint_as_float((e - 1) << 23);
  return __uint_as_float(0x00200000u << e);
}

// The scale byte and the 16 nibble bytes of a block starting sh bits (0, 8, 16, 24) into
// the five aligned words w that cover it.
__device__ inline void split_block(const unsigned w[5], unsigned sh, unsigned &e, unsigned q[4]) {
  e = (w[0] >> sh) & 0xFFu;
#pragma unroll
  for (int i = 0; i < 4; ++i) q[i] = __funnelshift_rc(w[i], w[i + 1], sh + 8);
}

// The scale byte and the 16 nibble bytes of the block at p (any alignment).
__device__ inline void load_block(const std::uint8_t *p, unsigned &e, unsigned q[4]) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const unsigned *a = reinterpret_cast<const unsigned *>(addr & ~std::uintptr_t(3));
  const unsigned sh = static_cast<unsigned>(addr & 3) * 8;
  unsigned w[5];
#pragma unroll
  for (int i = 0; i < 5; ++i) w[i] = __ldg(a + i);  // the last word holds byte 16 of the block
  split_block(w, sh, e, q);
}

// Twice the e2m1 values of the block's 32 elements, in element order.
__device__ inline void decode_block(const unsigned q[4], float v[32]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Nibbles of word i, in order: lo(4i), hi(4i), lo(4i+1), hi(4i+1), ... (lo(j) is element
    // j, hi(j) element j + 16).
    const unsigned mags[2] = {__byte_perm(kLutLo, kLutHi, q[i] & 0x7777u),
                              __byte_perm(kLutLo, kLutHi, (q[i] >> 16) & 0x7777u)};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const unsigned mag = (mags[k / 4] >> (8 * (k % 4))) & 0xFFu;
      const unsigned sign = (q[i] << (28 - 4 * k)) & 0x80000000u;  // bit 4k + 3 to bit 31
      const float f = __uint_as_float(__float_as_uint(static_cast<float>(mag)) | sign);
      v[(k % 2) * 16 + 4 * i + k / 2] = f;
    }
  }
}

// bf16 bits of the e2m1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} of codes 0..7, split into
// their low and high bytes (byte i of the pair of words = code i), for one byte permute each.
constexpr unsigned kBf16LoA = 0xC0800000u, kBf16LoB = 0xC0804000u;
constexpr unsigned kBf16HiA = 0x3F3F3F00u, kBf16HiB = 0x40404040u;

// 2^(e - 127) in bf16, in both halves: the exponent field is e (e = 0: the subnormal 2^-127;
// 255: NaN).
__device__ inline __nv_bfloat162 scale_bf16x2(unsigned e) {
  const unsigned sbits = e == 0 ? 0x0040u : e == 255 ? 0x7FC0u : e << 7;
  return __halves2bfloat162(__ushort_as_bfloat16(sbits), __ushort_as_bfloat16(sbits));
}

// The bf16 values, e2m1 times the scale, of the 8 codes of one nibble word q (byte b: code
// b in its low nibble, code 16 + b in its high one, as a block's bytes hold them): out[2h] =
// the low nibbles of bytes 2h, 2h + 1, out[2h + 1] = their high nibbles, each a bf16 pair
// (the first byte's value in the low half). The magnitudes' bf16 bits are looked up with
// byte permutes (no integer-to-float conversion), the signs or-ed in, and one bf16x2 multiply
// by the power-of-two scale a pair: every product is exact in bf16 (an e2m1 value has at
// most two significant bits, bf16 subnormals reach 2^-133), so the bits equal decode_block's
// values times e8m0_half(e), rounded to bf16.
__device__ __forceinline__ void decode_word_bf16(unsigned q, __nv_bfloat162 scale,
                                                 unsigned out[4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // Selector h covers bytes 2h, 2h + 1: nibbles lo(2h), hi(2h), lo(2h + 1), hi(2h + 1).
    const unsigned sel = (q >> (16 * h)) & 0x7777u;
    const unsigned lo = __byte_perm(kBf16LoA, kBf16LoB, sel);
    const unsigned hi = __byte_perm(kBf16HiA, kBf16HiB, sel);
    // Bytes 2h, 2h + 1 at bytes 0, 2 (zeros between): the low nibbles' sign bits (3, 19) go to
    // 15, 31 shifted by 12, the high nibbles' (7, 23) shifted by 8.
    const unsigned sg = __byte_perm(q, 0, h ? 0x4342u : 0x4140u);
    const unsigned lo_pair = __byte_perm(lo, hi, 0x6240) | ((sg << 12) & 0x80008000u);
    const unsigned hi_pair = __byte_perm(lo, hi, 0x7351) | ((sg << 8) & 0x80008000u);
    __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162 *>(&lo_pair);
    __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162 *>(&hi_pair);
    a = __hmul2(a, scale);
    b = __hmul2(b, scale);
    out[2 * h] = *reinterpret_cast<const unsigned *>(&a);
    out[2 * h + 1] = *reinterpret_cast<const unsigned *>(&b);
  }
}

// The bf16 value of every element of a block, e2m1 times 2^(e - 127), as 16 words of bf16
// pairs (word j: elements 2j, 2j + 1), by decode_word_bf16.
__device__ inline void decode_block_bf16(const unsigned q[4], unsigned e, unsigned out[16]) {
  const __nv_bfloat162 scale = scale_bf16x2(e);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // Word i's bytes b = 0..3 hold elements 4i + b (low nibble) and 16 + 4i + b (high).
    unsigned w[4];
    decode_word_bf16(q[i], scale, w);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      out[2 * i + h] = w[2 * h];          // elements 4i + 2h, 4i + 2h + 1
      out[8 + 2 * i + h] = w[2 * h + 1];  // elements 16 + 4i + 2h, + 1
    }
  }
}

}  // namespace keel::cuda::mxfp4
