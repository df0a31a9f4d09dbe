// An MXFP4 row (formats/mxfp4.h) to float32 with AVX2, for the linear layer's dequantized
// tiles (internal to linear.cpp). The values equal formats' dequantize_mxfp4 bit for bit:
// each is twice its e2m1 value (a permute of an 8-float table by the code's low 3 bits,
// the sign bit or-ed in) times 2^(e - 128), the same exact product as e2m1 * 2^(e - 127).
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/cpu/linear_tiles.h"

namespace keel::cpu::tiles {

#ifdef KEEL_LINEAR_X86
// 2^(e - 128) as float bits (e = 0, 1 are subnormal); NaN for e = 255.
inline std::uint32_t mxfp4_half_scale_bits(std::uint32_t e) {
  if (e >= 2) return e == 255 ? 0x7FC00000u : (e - 1) << 23;
  return 0x00200000u << e;
}

KEEL_TARGET_AVX2 inline void dequantize_mxfp4_avx2(const std::byte *src, float *y, std::int64_t K) {
  const auto *b = reinterpret_cast<const std::uint8_t *>(src);
  const __m256 lut = _mm256_setr_ps(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 6.0f, 8.0f, 12.0f);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  for (std::int64_t i = 0; i < K / 32; ++i, b += 17, y += 32) {
    const __m256 hs =
        _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(mxfp4_half_scale_bits(b[0]))));
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b + 1));
    const __m128i codes[2] = {_mm_and_si128(qs, low4), _mm_and_si128(_mm_srli_epi16(qs, 4), low4)};
    for (int h = 0; h < 2; ++h)      // elements 0..15 (low nibbles), 16..31 (high)
      for (int g = 0; g < 2; ++g) {  // 8 at a time
        const __m256i c = _mm256_cvtepu8_epi32(g ? _mm_srli_si128(codes[h], 8) : codes[h]);
        const __m256 mag = _mm256_permutevar8x32_ps(lut, c);
        const __m256i sign =
            _mm256_and_si256(_mm256_slli_epi32(c, 28), _mm256_set1_epi32(INT32_MIN));
        const __m256 v = _mm256_or_ps(mag, _mm256_castsi256_ps(sign));
        _mm256_storeu_ps(y + 16 * h + 8 * g, _mm256_mul_ps(v, hs));
      }
  }
}
#endif

}  // namespace keel::cpu::tiles
