// MXFP4 register tiles of the CPU linear layer (internal to linear.cpp; the block layout
// is formats/mxfp4.h). As for Q4_0, the weights multiply 8-bit quantized activations with
// integer dot products: a code is read as twice its e2m1 value, a small integer (0, 1, 2,
// 3, 4, 6, 8, 12 and their negations, by a 16-entry byte lookup), and each block's integer
// sum is scaled by 2^(e - 128) (exact: a power of two) times the activation block's scale.
// Like linear_tiles.h, every (token, row) pair is one accumulator chain whose order does
// not depend on the tile shape: batch-invariant within a family.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "exec/cpu/linear_tiles.h"

namespace keel::cpu::tiles {

constexpr int kMxfp4Bytes = 17;

// 2^(e - 128) (e = 0, 1 are subnormal; 255 is NaN), the scale of doubled codes, for every e.
struct Mxfp4HalfScales {
  float v[256];
  constexpr Mxfp4HalfScales() : v{} {
    for (int e = 0; e < 256; ++e)
      v[e] = std::bit_cast<float>(e >= 2 ? (e == 255 ? 0x7FC00000u : std::uint32_t(e - 1) << 23)
                                         : 0x00200000u << e);
  }
};
inline constexpr Mxfp4HalfScales kMxfp4HalfScales{};

struct Mxfp4Row {
  static constexpr std::int8_t kValues[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                              0, -1, -2, -3, -4, -6, -8, -12};
  static const std::uint8_t *block(const std::byte *r, std::int64_t i) {
    return reinterpret_cast<const std::uint8_t *>(r) + i * kMxfp4Bytes;
  }
  static float scale(const std::byte *r, std::int64_t i) {
    return kMxfp4HalfScales.v[block(r, i)[0]];
  }
  static void values(const std::byte *r, std::int64_t i, std::int8_t *v) {
    const std::uint8_t *q = block(r, i) + 1;
    for (int j = 0; j < 16; ++j) {
      v[j] = kValues[q[j] & 0xF];
      v[j + 16] = kValues[q[j] >> 4];
    }
  }
#ifdef KEEL_LINEAR_X86
  // The 32 codes of block i, 0..15: low nibbles (elements 0..15) in the low lane.
  KEEL_TARGET_AVX2 static __m256i codes32(const std::byte *r, std::int64_t i) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(block(r, i) + 1));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  }
  // Signed values of block i.
  KEEL_TARGET_AVX2 static __m256i load32(const std::byte *r, std::int64_t i) {
    const __m256i lut =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kValues)));
    return _mm256_shuffle_epi8(lut, codes32(r, i));
  }
  // Blocks i and i + 1 (or zeros' code for the second when !two), values + 12, unsigned.
  KEEL_TARGET_AVX512 static __m512i load64u(const std::byte *r, std::int64_t i, bool two) {
    const __m256i c0 = codes32(r, i);
    const __m256i c1 = two ? codes32(r, i + 1) : _mm256_setzero_si256();
    const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
    const __m128i lut16 = _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(lut16), c);
  }
#endif
};

// The scalar family (no FMA contraction, as linear_tiles.h's portable kernels).
template <int MR, int NR>
KEEL_NO_FP_CONTRACT void mxfp4_scalar(const std::byte *const *w, const BlockQ8Act *const *x,
                                      std::int64_t nb, float *out, std::int64_t ldo) {
  KEEL_NO_FP_CONTRACT_BODY
  float acc[MR][NR] = {};
  std::int8_t wv[NR][32];
  for (std::int64_t i = 0; i < nb; ++i) {
    float dw[NR];
    for (int r = 0; r < NR; ++r) {
      Mxfp4Row::values(w[r], i, wv[r]);
      dw[r] = Mxfp4Row::scale(w[r], i);
    }
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) {
        std::int32_t s = 0;
        for (int j = 0; j < 32; ++j) s += wv[r][j] * x[m][i].qs[j];
        acc[m][r] += static_cast<float>(s) * (dw[r] * x[m][i].d);
      }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * ldo + r] = acc[m][r];
}

#ifdef KEEL_LINEAR_X86
// |w| times sign(w) x with maddubs (|w| <= 12, so the int16 pair sums never saturate).
template <int MR, int NR>
KEEL_TARGET_AVX2 void mxfp4_avx2(const std::byte *const *w, const BlockQ8Act *const *x,
                                 std::int64_t nb, float *out, std::int64_t ldo) {
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < nb; ++i) {
    __m256i wq[NR], aw[NR];
    float dw[NR];
    for (int r = 0; r < NR; ++r) {
      wq[r] = Mxfp4Row::load32(w[r], i);
      aw[r] = _mm256_sign_epi8(wq[r], wq[r]);
      dw[r] = Mxfp4Row::scale(w[r], i);
    }
    for (int m = 0; m < MR; ++m) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[m][i].qs));
      const float dx = x[m][i].d;
      for (int r = 0; r < NR; ++r) {
        const __m256i p = dot_u8s8_avx2(_mm256_setzero_si256(), aw[r], _mm256_sign_epi8(xq, wq[r]));
        acc[m][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(p), acc[m][r]);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * ldo + r] = hsum8(acc[m][r]);
}

// Two blocks a pass with VNNI: unsigned (value + 12) weights, 12 * sum(x) per block
// subtracted in the integer accumulator, one FMA by the two blocks' scales.
template <int MR, int NR>
KEEL_TARGET_AVX512 void mxfp4_avx512(const std::byte *const *w, const BlockQ8Act *const *x,
                                     std::int64_t nb, float *out, std::int64_t ldo) {
  constexpr int kOffset = 12;
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_setzero_ps();
  for (std::int64_t i = 0; i < nb; i += 2) {
    const bool two = i + 1 < nb;
    __m512i wq[NR];
    __m512 dw[NR];
    for (int r = 0; r < NR; ++r) {
      wq[r] = Mxfp4Row::load64u(w[r], i, two);
      dw[r] = halves(Mxfp4Row::scale(w[r], i), two ? Mxfp4Row::scale(w[r], i + 1) : 0.0f);
    }
    for (int m = 0; m < MR; ++m) {
      const BlockQ8Act *xb = x[m] + i;
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb[0].qs));
      const __m256i x1 = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb[1].qs))
                             : _mm256_setzero_si256();
      const __m512i xq = _mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1);
      const __m512 dx = halves(xb[0].d, two ? xb[1].d : 0.0f);
      const __m512i init =
          _mm512_mask_set1_epi32(_mm512_maskz_set1_epi32(0x0001, -kOffset * xb[0].sum), 0x0100,
                                 two ? -kOffset * xb[1].sum : 0);
      for (int r = 0; r < NR; ++r) {
        const __m512i p = _mm512_dpbusd_epi32(init, wq[r], xq);
        acc[m][r] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dx), _mm512_cvtepi32_ps(p), acc[m][r]);
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * ldo + r] = hsum16(acc[m][r]);
}
#endif

}  // namespace keel::cpu::tiles
