// Register-tile kernels of the CPU linear layer (internal to linear.cpp), one family per
// instruction set: portable C++, AVX2 (+FMA, F16C) and AVX-512 (F, BW, VL, DQ, VNNI). The
// SIMD families carry a `target` attribute instead of depending on -march, so a portable
// build (KEEL_NATIVE=OFF) still runs them; linear.cpp picks one at run time (cpuid).
//
// Every tile computes out[m * ldo + r] = dot(w row r, x row m) for an MR x NR tile with one
// accumulator chain per (m, r) whose order does not depend on MR or NR: results are
// batch-invariant within a family. Different families round differently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "exec/cpu/quant_blocks.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KEEL_LINEAR_X86 1
#include <immintrin.h>
#define KEEL_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KEEL_TARGET_AVX512 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))
#endif

namespace keel::cpu::tiles {

// ---------------------------------------------------------------- weight rows
// A row loader reads element k (scalar) or 8 / 16 elements from k (SIMD) of a row as floats.
struct F32Row {
  static float at(const std::byte *r, std::int64_t k) {
    return reinterpret_cast<const float *>(r)[k];
  }
#ifdef KEEL_LINEAR_X86
  KEEL_TARGET_AVX2 static __m256 load8(const std::byte *r, std::int64_t k) {
    return _mm256_loadu_ps(reinterpret_cast<const float *>(r) + k);
  }
  KEEL_TARGET_AVX512 static __m512 load16(const std::byte *r, std::int64_t k) {
    return _mm512_loadu_ps(reinterpret_cast<const float *>(r) + k);
  }
#endif
};
struct F16Row {
  static float at(const std::byte *r, std::int64_t k) {
    return f16_to_f32(reinterpret_cast<const std::uint16_t *>(r)[k]);
  }
#ifdef KEEL_LINEAR_X86
  KEEL_TARGET_AVX2 static __m256 load8(const std::byte *r, std::int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(r + 2 * k)));
  }
  KEEL_TARGET_AVX512 static __m512 load16(const std::byte *r, std::int64_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(r + 2 * k)));
  }
#endif
};
struct BF16Row {
  static float at(const std::byte *r, std::int64_t k) {
    return bf16_to_f32(reinterpret_cast<const std::uint16_t *>(r)[k]);
  }
#ifdef KEEL_LINEAR_X86
  KEEL_TARGET_AVX2 static __m256 load8(const std::byte *r, std::int64_t k) {
    const __m256i u =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(r + 2 * k)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  KEEL_TARGET_AVX512 static __m512 load16(const std::byte *r, std::int64_t k) {
    const __m512i u =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(r + 2 * k)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
#endif
};

// Integer rows: 32-element blocks with an f16 scale. `kOffset` is what the SIMD loads add to
// each value so that it is unsigned (the byte dot products multiply unsigned by signed); the
// kernels subtract kOffset * sum(x) per block, exactly, in the integer accumulator.
struct Q8_0Row {
  static constexpr int kOffset = 128;
  static std::uint16_t scale_bits(const std::byte *r, std::int64_t i) {
    return reinterpret_cast<const BlockQ8_0 *>(r)[i].d;
  }
  static void values(const std::byte *r, std::int64_t i, std::int8_t *v) {
    std::memcpy(v, reinterpret_cast<const BlockQ8_0 *>(r)[i].qs, 32);
  }
#ifdef KEEL_LINEAR_X86
  // Signed values (AVX2 multiplies |w| by sign(w) x: maddubs would saturate on w + 128).
  KEEL_TARGET_AVX2 static __m256i load32(const std::byte *r, std::int64_t i) {
    return _mm256_loadu_si256(
        reinterpret_cast<const __m256i *>(reinterpret_cast<const BlockQ8_0 *>(r)[i].qs));
  }
  // Blocks i and i + 1 (or zeros for the second when !two), plus kOffset.
  KEEL_TARGET_AVX512 static __m512i load64u(const std::byte *r, std::int64_t i, bool two) {
    const auto *b = reinterpret_cast<const BlockQ8_0 *>(r) + i;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b[0].qs));
    const __m256i hi = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b[1].qs))
                           : _mm256_set1_epi8(-128);
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1),
                            _mm512_set1_epi8(-128));
  }
#endif
};
struct Q4_0Row {
  static constexpr int kOffset = 8;
  static std::uint16_t scale_bits(const std::byte *r, std::int64_t i) {
    return reinterpret_cast<const BlockQ4_0 *>(r)[i].d;
  }
  static void values(const std::byte *r, std::int64_t i, std::int8_t *v) {
    const auto &b = reinterpret_cast<const BlockQ4_0 *>(r)[i];
    for (int j = 0; j < 16; ++j) {
      v[j] = static_cast<std::int8_t>((b.qs[j] & 0xF) - 8);
      v[j + 16] = static_cast<std::int8_t>((b.qs[j] >> 4) - 8);
    }
  }
#ifdef KEEL_LINEAR_X86
  // The 32 nibbles of block i, 0..15 (the value plus kOffset).
  KEEL_TARGET_AVX2 static __m256i load32(const std::byte *r, std::int64_t i) {
    const __m128i q = _mm_loadu_si128(
        reinterpret_cast<const __m128i *>(reinterpret_cast<const BlockQ4_0 *>(r)[i].qs));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
  }
  KEEL_TARGET_AVX512 static __m512i load64u(const std::byte *r, std::int64_t i, bool two) {
    const auto *b = reinterpret_cast<const BlockQ4_0 *>(r) + i;
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b[0].qs));
    const __m128i q1 =
        two ? _mm_loadu_si128(reinterpret_cast<const __m128i *>(b[1].qs)) : _mm_setzero_si128();
    const __m256i q = _mm256_set_m128i(q1, q0);
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i lo = _mm256_and_si256(q, m), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m);
    // [q0 lo, q1 lo, q0 hi, q1 hi] -> [q0 lo, q0 hi, q1 lo, q1 hi] (128-bit lanes).
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    return _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));
  }
#endif
};

// ---------------------------------------------------------------- portable C++
// The compiler may fuse a * b + c into an FMA in some instantiations of a loop and not in
// others (GCC's default -ffp-contract=fast where the target has FMA), which would make
// results depend on the tile shape: the portable kernels forbid it.
#if defined(__clang__)
#define KEEL_NO_FP_CONTRACT
#define KEEL_NO_FP_CONTRACT_BODY _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define KEEL_NO_FP_CONTRACT __attribute__((optimize("fp-contract=off")))
#define KEEL_NO_FP_CONTRACT_BODY
#else
#define KEEL_NO_FP_CONTRACT
#define KEEL_NO_FP_CONTRACT_BODY
#endif

KEEL_NO_FP_CONTRACT inline float hsum8(const float *v) {
  const float a = (v[0] + v[4]) + (v[2] + v[6]);
  const float b = (v[1] + v[5]) + (v[3] + v[7]);
  return a + b;
}

template <class Row, int MR, int NR>
KEEL_NO_FP_CONTRACT void float_scalar(const std::byte *const *w, const float *const *x,
                                      std::int64_t K, float *out, std::int64_t ldo) {
  KEEL_NO_FP_CONTRACT_BODY
  const std::int64_t K8 = K / 8 * 8;
  float acc[MR][NR][8] = {};
  for (std::int64_t k = 0; k < K8; k += 8)
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r)
        for (int l = 0; l < 8; ++l) acc[m][r][l] += Row::at(w[r], k + l) * x[m][k + l];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) {
      out[m * ldo + r] = hsum8(acc[m][r]);
      for (std::int64_t k = K8; k < K; ++k) out[m * ldo + r] += Row::at(w[r], k) * x[m][k];
    }
}

template <class Row, int MR, int NR>
KEEL_NO_FP_CONTRACT void q8_scalar(const std::byte *const *w, const BlockQ8Act *const *x,
                                   std::int64_t nb, float *out, std::int64_t ldo) {
  KEEL_NO_FP_CONTRACT_BODY
  float acc[MR][NR] = {};
  std::int8_t wv[NR][32];
  for (std::int64_t i = 0; i < nb; ++i) {
    float dw[NR];
    for (int r = 0; r < NR; ++r) {
      Row::values(w[r], i, wv[r]);
      dw[r] = f16_to_f32(Row::scale_bits(w[r], i));
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
// ---------------------------------------------------------------- AVX2
KEEL_TARGET_AVX2 inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <class Row, int MR, int NR>
KEEL_TARGET_AVX2 void float_avx2(const std::byte *const *w, const float *const *x, std::int64_t K,
                                 float *out, std::int64_t ldo) {
  const std::int64_t K8 = K / 8 * 8;
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < K8; k += 8) {
    __m256 wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = Row::load8(w[r], k);
    for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_loadu_ps(x[m] + k);
      for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_fmadd_ps(wv[r], xv, acc[m][r]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) {
      out[m * ldo + r] = hsum8(acc[m][r]);
      for (std::int64_t k = K8; k < K; ++k) out[m * ldo + r] += Row::at(w[r], k) * x[m][k];
    }
}

// acc + eight int32 sums of four products each of unsigned a and signed b bytes. The callers
// keep a <= 128 (|w| of Q8_0) or a <= 15 (Q4_0) and |b| <= 127, so that maddubs's int16 pair
// sums never saturate.
KEEL_TARGET_AVX2 inline __m256i dot_u8s8_avx2(__m256i acc, __m256i a, __m256i b) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
}

template <class Row, int MR, int NR>
KEEL_TARGET_AVX2 void q8_avx2(const std::byte *const *w, const BlockQ8Act *const *x,
                              std::int64_t nb, float *out, std::int64_t ldo) {
  constexpr bool kSigned = Row::kOffset == 128;  // Q8_0: |w| times sign(w) x
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_setzero_ps();
  for (std::int64_t i = 0; i < nb; ++i) {
    __m256i wq[NR], aw[NR];
    float dw[NR];
    for (int r = 0; r < NR; ++r) {
      wq[r] = Row::load32(w[r], i);
      if constexpr (kSigned) aw[r] = _mm256_sign_epi8(wq[r], wq[r]);
      dw[r] = _cvtsh_ss(Row::scale_bits(w[r], i));
    }
    for (int m = 0; m < MR; ++m) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x[m][i].qs));
      const float dx = x[m][i].d;
      if constexpr (kSigned) {
        for (int r = 0; r < NR; ++r) {
          const __m256i p =
              dot_u8s8_avx2(_mm256_setzero_si256(), aw[r], _mm256_sign_epi8(xq, wq[r]));
          acc[m][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(p), acc[m][r]);
        }
      } else {
        // sum((q - 8) x) = sum(q x) - 8 sum(x), exactly, in the integer accumulator.
        const __m256i init = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-Row::kOffset * x[m][i].sum));
        for (int r = 0; r < NR; ++r) {
          const __m256i p = dot_u8s8_avx2(init, wq[r], xq);
          acc[m][r] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(p), acc[m][r]);
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * ldo + r] = hsum8(acc[m][r]);
}

// ---------------------------------------------------------------- AVX-512
// A fixed-order horizontal sum (GCC 12's _mm512_reduce_add_ps warns of an undefined value).
KEEL_TARGET_AVX512 inline float hsum16(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 s = _mm512_castps512_ps128(v);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// The 16 horizontal sums of a 4 x 4 tile at once, each in hsum16's order (a tile's result
// must not depend on its neighbours: batch invariance), a transpose tree of 45 operations
// where 16 hsum16 calls take about 130: it matters where K is small (a 64-wide lm_head).
// out[m * ldo + r] = hsum16(acc[m][r]).
KEEL_TARGET_AVX512 inline void store_hsums_4x4(const __m512 (&acc)[4][4], float *out,
                                               std::int64_t ldo) {
  // a[i] = acc[i % 4][i / 4]: the tree leaves vector a[4e + q] in lane 4q + e, so token m's
  // four rows come out side by side in 128-bit lane m.
  __m512 b[8], c[4], d[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // v[e] + v[8 + e], two vectors a register
    const __m512 x = acc[(2 * i) % 4][(2 * i) / 4], y = acc[(2 * i + 1) % 4][(2 * i + 1) / 4];
    b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
  }
#pragma GCC unroll 8
  for (int j = 0; j < 4; ++j)  // + the other 128-bit half: four vectors a register
    c[j] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(b[2 * j], b[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 8
  for (int k = 0; k < 2; ++k)  // s[0] + s[2], s[1] + s[3]
    d[k] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(c[2 * k], c[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
  _mm_storeu_ps(out, _mm512_castps512_ps128(e));
  _mm_storeu_ps(out + ldo, _mm512_extractf32x4_ps(e, 1));
  _mm_storeu_ps(out + 2 * ldo, _mm512_extractf32x4_ps(e, 2));
  _mm_storeu_ps(out + 3 * ldo, _mm512_extractf32x4_ps(e, 3));
}

// 16 floats a pass; the K % 16 tail is added after the horizontal sum, as for every MR.
template <class Row, int MR, int NR>
KEEL_TARGET_AVX512 void float_avx512(const std::byte *const *w, const float *const *x,
                                     std::int64_t K, float *out, std::int64_t ldo) {
  const std::int64_t K16 = K / 16 * 16;
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < K16; k += 16) {
    __m512 wv[NR];
    for (int r = 0; r < NR; ++r) wv[r] = Row::load16(w[r], k);
    for (int m = 0; m < MR; ++m) {
      const __m512 xv = _mm512_loadu_ps(x[m] + k);
      for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_fmadd_ps(wv[r], xv, acc[m][r]);
    }
  }
  if constexpr (MR == 4 && NR == 4) {
    store_hsums_4x4(acc, out, ldo);
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r)
        for (std::int64_t k = K16; k < K; ++k) out[m * ldo + r] += Row::at(w[r], k) * x[m][k];
  } else {
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) {
        out[m * ldo + r] = hsum16(acc[m][r]);
        for (std::int64_t k = K16; k < K; ++k) out[m * ldo + r] += Row::at(w[r], k) * x[m][k];
      }
  }
}

// [a x 8, b x 8]
KEEL_TARGET_AVX512 inline __m512 halves(float a, float b) {
  return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

// Two blocks a pass: 64 unsigned weight bytes (value + kOffset) against 64 activation bytes
// in one VNNI dot product, the offset's share (kOffset * sum(x) per block) preloaded into
// the integer accumulator, then one FMA by the two blocks' scales. Blocks [i0, nb) into acc.
template <class Row, int MR, int NR>
KEEL_TARGET_AVX512 inline void q8_avx512_blocks(__m512 (&acc)[MR][NR], const std::byte *const *w,
                                                const BlockQ8Act *const *x, std::int64_t i0,
                                                std::int64_t nb) {
  for (std::int64_t i = i0; i < nb; i += 2) {
    const bool two = i + 1 < nb;
    __m512i wq[NR];
    __m512 dw[NR];
    for (int r = 0; r < NR; ++r) {
      wq[r] = Row::load64u(w[r], i, two);
      dw[r] = halves(_cvtsh_ss(Row::scale_bits(w[r], i)),
                     two ? _cvtsh_ss(Row::scale_bits(w[r], i + 1)) : 0.0f);
    }
    for (int m = 0; m < MR; ++m) {
      const BlockQ8Act *xb = x[m] + i;
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb[0].qs));
      const __m256i x1 = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb[1].qs))
                             : _mm256_setzero_si256();
      const __m512i xq = _mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1);
      const __m512 dx = halves(xb[0].d, two ? xb[1].d : 0.0f);
      const __m512i init =
          _mm512_mask_set1_epi32(_mm512_maskz_set1_epi32(0x0001, -Row::kOffset * xb[0].sum), 0x0100,
                                 two ? -Row::kOffset * xb[1].sum : 0);
      for (int r = 0; r < NR; ++r) {
        const __m512i p = _mm512_dpbusd_epi32(init, wq[r], xq);
        acc[m][r] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dx), _mm512_cvtepi32_ps(p), acc[m][r]);
      }
    }
  }
}

template <int MR, int NR>
KEEL_TARGET_AVX512 inline void store_hsums(const __m512 (&acc)[MR][NR], float *out,
                                           std::int64_t ldo) {
  if constexpr (MR == 4 && NR == 4)
    store_hsums_4x4(acc, out, ldo);
  else
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) out[m * ldo + r] = hsum16(acc[m][r]);
}

// Q8_0 and Q4_0, eight blocks (256 weights) a step: the row's eight f16 scales converted at
// once. Q4_0's nibbles stay where they fall in each pass of two blocks (128-bit lanes [block
// i low, block i + 1 low, i high, i + 1 high]) while the activations are permuted to match,
// once a token instead of once a row. The last nb % 8 blocks take
// q8_avx512_blocks's passes.
template <class Row, int MR, int NR>
KEEL_TARGET_AVX512 void q8_avx512_by8(const std::byte *const *w, const BlockQ8Act *const *x,
                                      std::int64_t nb, float *out, std::int64_t ldo) {
  constexpr bool kNibbles = std::is_same_v<Row, Q4_0Row>;
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm512_setzero_ps();
  const std::int64_t nb8 = nb / 8 * 8;
  // Int32 lane l of a pass belongs to block i + (l / 4) % 2 (Q4_0) or i + l / 8 (Q8_0).
  const __m512i lane_block =
      kNibbles ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1)
               : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  constexpr __mmask16 kSecond = kNibbles ? 0xF0F0 : 0xFF00;  // lanes of block i + 1
  constexpr __mmask16 kSecondSum = kNibbles ? 0x0010 : 0x0100;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  for (std::int64_t i0 = 0; i0 < nb8; i0 += 8) {
    __m512 dw8[NR];
    for (int r = 0; r < NR; ++r) {
      std::uint16_t h[8];
      for (int j = 0; j < 8; ++j) h[j] = Row::scale_bits(w[r], i0 + j);
      dw8[r] = _mm512_castps256_ps512(
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h))));
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const std::int64_t i = i0 + 2 * c;
      const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(2 * c), lane_block);
      __m512i wq[NR];
      __m512 ws[NR];
      for (int r = 0; r < NR; ++r) {
        if constexpr (kNibbles) {
          const auto *b = reinterpret_cast<const BlockQ4_0 *>(w[r]) + i;
          const __m256i q =
              _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b[1].qs)),
                               _mm_loadu_si128(reinterpret_cast<const __m128i *>(b[0].qs)));
          wq[r] = _mm512_and_si512(
              _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), low4);
        } else {
          wq[r] = Row::load64u(w[r], i, true);
        }
        ws[r] = _mm512_permutexvar_ps(idx, dw8[r]);
      }
      for (int m = 0; m < MR; ++m) {
        const BlockQ8Act *xb = x[m] + i;
        __m512i xq = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb[0].qs))),
            _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xb[1].qs)), 1);
        if constexpr (kNibbles) xq = _mm512_shuffle_i64x2(xq, xq, _MM_SHUFFLE(3, 1, 2, 0));
        const __m512 dx =
            _mm512_mask_blend_ps(kSecond, _mm512_set1_ps(xb[0].d), _mm512_set1_ps(xb[1].d));
        const __m512i init =
            _mm512_mask_set1_epi32(_mm512_maskz_set1_epi32(0x0001, -Row::kOffset * xb[0].sum),
                                   kSecondSum, -Row::kOffset * xb[1].sum);
        for (int r = 0; r < NR; ++r) {
          const __m512i p = _mm512_dpbusd_epi32(init, wq[r], xq);
          acc[m][r] = _mm512_fmadd_ps(_mm512_mul_ps(ws[r], dx), _mm512_cvtepi32_ps(p), acc[m][r]);
        }
      }
    }
  }
  q8_avx512_blocks<Row>(acc, w, x, nb8, nb);
  store_hsums(acc, out, ldo);
}
#endif  // KEEL_LINEAR_X86

}  // namespace keel::cpu::tiles
