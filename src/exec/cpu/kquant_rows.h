// K-quant (Q4_K, Q5_K, Q6_K) register tiles of the CPU linear layer (internal to
// linear.cpp; block layouts in quant_blocks.h). As for Q4_0, the weights multiply the 8-bit
// activation blocks (32 values, one float scale) with integer dot products, so that a
// decode matvec reads the quantized rows once instead of dequantizing them to float32 first.
//
// A super-block of 256 weights is w = scale[g] * (q - kOffset) - min[g] per group g of 16
// (Q4_K / Q5_K: q unsigned 4 or 5 bits, a scale and a min per 32, kOffset = 0; Q6_K: q 6
// bits, kOffset = 32, a scale per 16, no min). Per (token, row) and group the integer sum
// sum(q x) - kOffset sum(x) is exact; the scales then enter in float, once per group.
// Like linear_tiles.h, every (token, row) pair is one accumulator chain whose order does
// not depend on the tile shape: batch-invariant within a family.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "exec/cpu/linear_tiles.h"

namespace keel::cpu::tiles {

// The 6-bit scales (bytes 0..7) and mins (bytes 8..15) of a Q4_K / Q5_K super-block's
// 12 packed bytes: sub-blocks 0..3 keep theirs in the low 6 bits of bytes 0..3 (scales) and
// 4..7 (mins); sub-blocks 4..7 take the low / high nibbles of bytes 8..11, with the top
// two bits of bytes 0..3 (scales) and 4..7 (mins) above them.
inline void unpack_scales_mins_k4(const std::uint8_t *packed, std::uint8_t out[16]) {
  std::uint32_t w[3];
  std::memcpy(w, packed, 12);
  constexpr std::uint32_t kLow6 = 0x3F3F3F3F, kLow4 = 0x0F0F0F0F, kLow2 = 0x03030303;
  const std::uint32_t scales_lo = w[0] & kLow6;
  const std::uint32_t scales_hi = (w[2] & kLow4) | (((w[0] >> 6) & kLow2) << 4);
  const std::uint32_t mins_lo = w[1] & kLow6;
  const std::uint32_t mins_hi = ((w[2] >> 4) & kLow4) | (((w[1] >> 6) & kLow2) << 4);
  const std::uint32_t words[4] = {scales_lo, scales_hi, mins_lo, mins_hi};
  std::memcpy(out, words, 16);
}

struct Q4KRow {
  static constexpr int kBytes = 144, kOffset = 0;
  static constexpr bool kHasMin = true;
  static const BlockQ4_K &block(const std::byte *r, std::int64_t sb) {
    return reinterpret_cast<const BlockQ4_K *>(r)[sb];
  }
  // q[256], scale and min per group of 16.
  static void unpack_factors(const std::byte *r, std::int64_t sb, float *scale, float *min) {
    const BlockQ4_K &b = block(r, sb);
    unpack_affine(b.d, b.dmin, b.scales, scale, min);
  }
  static void unpack(const std::byte *r, std::int64_t sb, std::uint8_t *q, float *scale,
                     float *min) {
    const BlockQ4_K &b = block(r, sb);
    unpack_affine(b.d, b.dmin, b.scales, scale, min);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = b.qs[32 * c + l] & 0xF;
        q[64 * c + 32 + l] = b.qs[32 * c + l] >> 4;
      }
  }
  static void unpack_affine(std::uint16_t d16, std::uint16_t dmin16, const std::uint8_t *packed,
                            float *scale, float *min) {
    std::uint8_t sm[16];
    unpack_scales_mins_k4(packed, sm);
    const float d = f16_to_f32(d16), dmin = f16_to_f32(dmin16);
    for (int g = 0; g < 16; ++g) {
      scale[g] = d * static_cast<float>(sm[g / 2]);
      min[g] = dmin * static_cast<float>(sm[8 + g / 2]);
    }
  }
#ifdef KEEL_LINEAR_X86
  // [d * scale[0..7], dmin * min[0..7]]
  KEEL_TARGET_AVX512 static __m512 factors(std::uint16_t d, std::uint16_t dmin,
                                           const std::uint8_t *packed) {
    std::uint8_t sm[16];
    unpack_scales_mins_k4(packed, sm);
    const __m512 v = _mm512_cvtepi32_ps(
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(sm))));
    return _mm512_mul_ps(halves(_cvtsh_ss(d), _cvtsh_ss(dmin)), v);
  }
  KEEL_TARGET_AVX512 static __m512 factors(const std::byte *r, std::int64_t sb) {
    const BlockQ4_K &b = block(r, sb);
    return factors(b.d, b.dmin, b.scales);
  }
  // The nibbles of sub-blocks 2c (low 256 bits) and 2c + 1 (high).
  KEEL_TARGET_AVX512 static __m512i nibbles(const std::uint8_t *qs, int c) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs + 32 * c));
    const __m256i m = _mm256_set1_epi8(0x0F);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, m)),
                              _mm256_and_si256(_mm256_srli_epi16(q, 4), m), 1);
  }
  KEEL_TARGET_AVX512 static __m512i load64u(const std::byte *r, std::int64_t sb, int c) {
    return nibbles(block(r, sb).qs, c);
  }
  // The 32 values of sub-block j (AVX2 passes: one activation block each).
  KEEL_TARGET_AVX2 static __m256i nibbles32(const std::uint8_t *qs, int j) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(qs + 32 * (j / 2)));
    return _mm256_and_si256(j & 1 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
  }
  KEEL_TARGET_AVX2 static __m256i load32u(const std::byte *r, std::int64_t sb, int j) {
    return nibbles32(block(r, sb).qs, j);
  }
  // Lane l of pass c (64 weights, 4 per lane) is in sub-block 2c + l / 8.
  KEEL_TARGET_AVX512 static __m512i scale_index(int c) {
    return _mm512_add_epi32(_mm512_set1_epi32(2 * c),
                            _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  }
#endif
};

struct Q5KRow {
  static constexpr int kBytes = 176, kOffset = 0;
  static constexpr bool kHasMin = true;
  static const BlockQ5_K &block(const std::byte *r, std::int64_t sb) {
    return reinterpret_cast<const BlockQ5_K *>(r)[sb];
  }
  // Element l of sub-block 2c takes bit 2c of qh[l] as its fifth bit; of 2c + 1, bit 2c + 1.
  static void unpack_factors(const std::byte *r, std::int64_t sb, float *scale, float *min) {
    const BlockQ5_K &b = block(r, sb);
    Q4KRow::unpack_affine(b.d, b.dmin, b.scales, scale, min);
  }
  static void unpack(const std::byte *r, std::int64_t sb, std::uint8_t *q, float *scale,
                     float *min) {
    const BlockQ5_K &b = block(r, sb);
    unpack_factors(r, sb, scale, min);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = (b.qs[32 * c + l] & 0xF) | (((b.qh[l] >> (2 * c)) & 1) << 4);
        q[64 * c + 32 + l] = (b.qs[32 * c + l] >> 4) | (((b.qh[l] >> (2 * c + 1)) & 1) << 4);
      }
  }
#ifdef KEEL_LINEAR_X86
  KEEL_TARGET_AVX512 static __m512 factors(const std::byte *r, std::int64_t sb) {
    const BlockQ5_K &b = block(r, sb);
    return Q4KRow::factors(b.d, b.dmin, b.scales);
  }
  KEEL_TARGET_AVX512 static __m512i load64u(const std::byte *r, std::int64_t sb, int c) {
    const BlockQ5_K &b = block(r, sb);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.qh));
    const __m512i bit = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << (2 * c)))),
        _mm256_set1_epi8(static_cast<char>(2 << (2 * c))), 1);
    const __mmask64 fifth =
        _mm512_test_epi8_mask(_mm512_inserti64x4(_mm512_castsi256_si512(h), h, 1), bit);
    const __m512i q = Q4KRow::nibbles(b.qs, c);
    return _mm512_mask_add_epi8(q, fifth, q, _mm512_set1_epi8(16));
  }
  KEEL_TARGET_AVX2 static __m256i load32u(const std::byte *r, std::int64_t sb, int j) {
    const BlockQ5_K &b = block(r, sb);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.qh));
    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << j));
    const __m256i fifth =
        _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bit), bit), _mm256_set1_epi8(16));
    return _mm256_or_si256(Q4KRow::nibbles32(b.qs, j), fifth);
  }
  KEEL_TARGET_AVX512 static __m512i scale_index(int c) { return Q4KRow::scale_index(c); }
#endif
};

struct Q6KRow {
  static constexpr int kBytes = 210, kOffset = 32;
  static constexpr bool kHasMin = false;
  static const BlockQ6_K &block(const std::byte *r, std::int64_t sb) {
    return reinterpret_cast<const BlockQ6_K *>(r)[sb];
  }
  // Half h (128 elements) holds ql[64 h .. 64 h + 63] and qh[32 h .. 32 h + 31]: element
  // 32 j + l (j < 4, l < 32) has low bits from ql[64 h + l + 32 (j & 1)] (low nibble for
  // j < 2, high for j >= 2) and high bits 2 j, 2 j + 1 of qh[32 h + l].
  static void unpack_factors(const std::byte *r, std::int64_t sb, float *scale, float *min) {
    const BlockQ6_K &b = block(r, sb);
    const float d = f16_to_f32(b.d);
    for (int g = 0; g < 16; ++g) {
      scale[g] = d * static_cast<float>(b.scales[g]);
      min[g] = 0.0f;
    }
  }
  static void unpack(const std::byte *r, std::int64_t sb, std::uint8_t *q, float *scale,
                     float *min) {
    const BlockQ6_K &b = block(r, sb);
    unpack_factors(r, sb, scale, min);
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 4; ++j)
        for (int l = 0; l < 32; ++l) {
          const std::uint8_t lo = b.ql[64 * h + l + 32 * (j & 1)];
          const int low = j < 2 ? lo & 0xF : lo >> 4;
          const int high = (b.qh[32 * h + l] >> (2 * j)) & 3;
          q[128 * h + 32 * j + l] = static_cast<std::uint8_t>(low | (high << 4));
        }
  }
#ifdef KEEL_LINEAR_X86
  KEEL_TARGET_AVX512 static __m512 factors(const std::byte *r, std::int64_t sb) {
    const BlockQ6_K &b = block(r, sb);
    const __m512 s = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b.scales))));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)), s);
  }
  // Pass c covers elements 64 c .. 64 c + 63: half c / 2, j = 2 (c & 1) and j + 1.
  KEEL_TARGET_AVX512 static __m512i load64u(const std::byte *r, std::int64_t sb, int c) {
    const BlockQ6_K &b = block(r, sb);
    const int h = c / 2;
    const __m512i lo = _mm512_loadu_si512(b.ql + 64 * h);
    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.qh + 32 * h));
    __m512i high = _mm512_inserti64x4(_mm512_castsi256_si512(hb), _mm256_srli_epi16(hb, 2), 1);
    __m512i low = lo;
    if (c & 1) {
      high = _mm512_srli_epi16(high, 4);
      low = _mm512_srli_epi16(lo, 4);
    }
    low = _mm512_and_si512(low, _mm512_set1_epi8(0x0F));
    high = _mm512_slli_epi16(_mm512_and_si512(high, _mm512_set1_epi8(0x03)), 4);
    return _mm512_or_si512(low, high);
  }
  // Elements 32 j .. 32 j + 31 (j < 8): half j / 4, the unpack's j & 3.
  KEEL_TARGET_AVX2 static __m256i load32u(const std::byte *r, std::int64_t sb, int j) {
    const BlockQ6_K &b = block(r, sb);
    const int h = j / 4, k = j % 4;
    const __m256i lo =
        _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.ql + 64 * h + 32 * (k & 1)));
    const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b.qh + 32 * h));
    const __m256i low =
        _mm256_and_si256(k < 2 ? lo : _mm256_srli_epi16(lo, 4), _mm256_set1_epi8(0x0F));
    const __m256i high =
        _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(0x03));
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  }
  // Lane l of pass c is in group 4 c + l / 4.
  KEEL_TARGET_AVX512 static __m512i scale_index(int c) {
    return _mm512_add_epi32(_mm512_set1_epi32(4 * c),
                            _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  }
#endif
};

// The scalar family (no FMA contraction, as linear_tiles.h's portable kernels). nb = K / 32.
template <class Row, int MR, int NR>
KEEL_NO_FP_CONTRACT void kquant_scalar(const std::byte *const *w, const BlockQ8Act *const *x,
                                       std::int64_t nb, float *out, std::int64_t ldo) {
  KEEL_NO_FP_CONTRACT_BODY
  float acc[MR][NR] = {};
  std::uint8_t q[NR][256];
  float scale[NR][16], min[NR][16];
  for (std::int64_t sb = 0; sb < nb / 8; ++sb) {
    for (int r = 0; r < NR; ++r) Row::unpack(w[r], sb, q[r], scale[r], min[r]);
    for (int m = 0; m < MR; ++m)
      for (int g = 0; g < 16; ++g) {
        const BlockQ8Act &xb = x[m][sb * 8 + g / 2];
        const std::int8_t *xq = xb.qs + 16 * (g % 2);
        std::int32_t xs = 0;
        for (int l = 0; l < 16; ++l) xs += xq[l];
        for (int r = 0; r < NR; ++r) {
          std::int32_t s = 0;
          for (int l = 0; l < 16; ++l) s += q[r][16 * g + l] * xq[l];
          s -= Row::kOffset * xs;
          acc[m][r] += static_cast<float>(s) * (scale[r][g] * xb.d);
          if constexpr (Row::kHasMin) acc[m][r] -= static_cast<float>(xs) * (min[r][g] * xb.d);
        }
      }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * ldo + r] = acc[m][r];
}

#ifdef KEEL_LINEAR_X86
// Passes of 32 weights (one activation block) with maddubs (q <= 63 and |x| <= 127: the int16
// pair sums never saturate); lanes 0..3 are group 2j, 4..7 group 2j + 1.
template <class Row, int MR, int NR>
KEEL_TARGET_AVX2 void kquant_avx2(const std::byte *const *w, const BlockQ8Act *const *x,
                                  std::int64_t nb, float *out, std::int64_t ldo) {
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_setzero_ps();
  const __m256i ones16 = _mm256_set1_epi16(1);
  float scale[NR][16], min[NR][16];
  for (std::int64_t sb = 0; sb < nb / 8; ++sb) {
    for (int r = 0; r < NR; ++r) Row::unpack_factors(w[r], sb, scale[r], min[r]);
    for (int j = 0; j < 8; ++j) {
      __m256i wq[NR];
      __m256 ws[NR];
      for (int r = 0; r < NR; ++r) {
        wq[r] = Row::load32u(w[r], sb, j);
        ws[r] = _mm256_set_m128(_mm_set1_ps(scale[r][2 * j + 1]), _mm_set1_ps(scale[r][2 * j]));
      }
      for (int m = 0; m < MR; ++m) {
        const BlockQ8Act &xb = x[m][sb * 8 + j];
        const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb.qs));
        __m256i init = _mm256_setzero_si256();
        if constexpr (Row::kOffset != 0)  // -kOffset times each lane's sum of 4 activations
          init = _mm256_sub_epi32(
              init, _mm256_madd_epi16(
                        _mm256_maddubs_epi16(_mm256_set1_epi8(static_cast<char>(Row::kOffset)), xq),
                        ones16));
        const __m256 dx = _mm256_set1_ps(xb.d);
        for (int r = 0; r < NR; ++r) {
          const __m256i p =
              _mm256_add_epi32(init, _mm256_madd_epi16(_mm256_maddubs_epi16(wq[r], xq), ones16));
          acc[m][r] = _mm256_fmadd_ps(_mm256_mul_ps(ws[r], dx), _mm256_cvtepi32_ps(p), acc[m][r]);
        }
      }
    }
    if constexpr (Row::kHasMin) {  // once a super-block: block j's min against d_j * sum_j
      __m256 mins[NR];
      for (int r = 0; r < NR; ++r) {
        float m8[8];
        for (int j = 0; j < 8; ++j) m8[j] = min[r][2 * j];
        mins[r] = _mm256_loadu_ps(m8);
      }
      for (int m = 0; m < MR; ++m) {
        const BlockQ8Act *xb = x[m] + sb * 8;
        float s8[8];
        for (int j = 0; j < 8; ++j) s8[j] = xb[j].d * static_cast<float>(xb[j].sum);
        const __m256 s = _mm256_loadu_ps(s8);
        for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_fnmadd_ps(mins[r], s, acc[m][r]);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * ldo + r] = hsum8(acc[m][r]);
}

// Passes of 64 weights (two activation blocks) with VNNI: per lane (4 weights) the integer
// sum, minus kOffset times the lane's activation sum, times its group's scale and the
// block's activation scale. The mins once a super-block: Row::factors holds them in lanes
// 8..15, against each block's scale times sum there (lanes 0..7 zero).
template <class Row, int MR, int NR>
KEEL_TARGET_AVX512 void kquant_avx512(const std::byte *const *w, const BlockQ8Act *const *x,
                                      std::int64_t nb, float *out, std::int64_t ldo) {
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_setzero_ps();
  for (std::int64_t sb = 0; sb < nb / 8; ++sb) {
    __m512 f[NR];
    for (int r = 0; r < NR; ++r) f[r] = Row::factors(w[r], sb);
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m512i wq[NR];
      __m512 ws[NR];
      for (int r = 0; r < NR; ++r) {
        wq[r] = Row::load64u(w[r], sb, c);
        ws[r] = _mm512_permutexvar_ps(Row::scale_index(c), f[r]);
      }
      for (int m = 0; m < MR; ++m) {
        const BlockQ8Act *xb = x[m] + sb * 8 + 2 * c;
        const __m512i xq = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb[0].qs))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb[1].qs)), 1);
        const __m512 dx = halves(xb[0].d, xb[1].d);
        __m512i init = _mm512_setzero_si512();
        if constexpr (Row::kOffset != 0)
          init = _mm512_sub_epi32(
              init, _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                        _mm512_set1_epi8(static_cast<char>(Row::kOffset)), xq));
        for (int r = 0; r < NR; ++r) {
          const __m512i p = _mm512_dpbusd_epi32(init, wq[r], xq);
          acc[m][r] = _mm512_fmadd_ps(_mm512_mul_ps(ws[r], dx), _mm512_cvtepi32_ps(p), acc[m][r]);
        }
      }
    }
    if constexpr (Row::kHasMin)
      for (int m = 0; m < MR; ++m) {
        const BlockQ8Act *xb = x[m] + sb * 8;
        alignas(64) float sums[16] = {};
        for (int j = 0; j < 8; ++j) sums[8 + j] = xb[j].d * static_cast<float>(xb[j].sum);
        const __m512 s = _mm512_load_ps(sums);
        for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_fnmadd_ps(f[r], s, acc[m][r]);
      }
  }
  if constexpr (MR == 4 && NR == 4)
    store_hsums_4x4(acc, out, ldo);
  else
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) out[m * ldo + r] = hsum16(acc[m][r]);
}
#endif

}  // namespace keel::cpu::tiles
