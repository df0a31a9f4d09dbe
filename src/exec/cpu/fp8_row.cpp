#include "exec/cpu/fp8_row.h"

#include <algorithm>
#include <limits>

#include "formats/quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KEEL_FP8_X86 1
#include <immintrin.h>
#endif

namespace keel::cpu {

namespace {

#ifdef KEEL_FP8_X86
// e4m3 bits placed in an f16 (sign to bit 15, exponent and mantissa shifted left by 7) are
// the value / 256 exactly, subnormals included (f16's exponent range covers e4m3's); F16C
// converts 8 at a time. The NaN codes (S.1111.111) would read as 480: masked to NaN.
__attribute__((target("avx2,fma,f16c"))) void run_avx2(const std::uint8_t *src, float *dst,
                                                       std::int64_t n, float s) {
  const __m128i lo7 = _mm_set1_epi16(0x7F), sign = _mm_set1_epi16(0x80);
  const __m256 k256 = _mm256_set1_ps(256.0f), vs = _mm256_set1_ps(s),
               nan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m128i b =
        _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(src + k)));
    const __m128i mag = _mm_and_si128(b, lo7);
    const __m128i h =
        _mm_or_si128(_mm_slli_epi16(mag, 7), _mm_slli_epi16(_mm_and_si128(b, sign), 8));
    const __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtph_ps(h), k256), vs);
    const __m256 is_nan = _mm256_castsi256_ps(_mm256_cvtepi16_epi32(_mm_cmpeq_epi16(mag, lo7)));
    _mm256_storeu_ps(dst + k, _mm256_blendv_ps(v, nan, is_nan));
  }
  for (; k < n; ++k) dst[k] = fp8_e4m3_to_float(src[k]) * s;
}
#endif

}  // namespace

void fp8_row_to_f32(const std::uint8_t *src, float *dst, std::int64_t n, const float *scales,
                    std::int64_t block_cols, bool simd) {
#ifdef KEEL_FP8_X86
  if (simd) {
    for (std::int64_t k0 = 0, b = 0; k0 < n; k0 += block_cols, ++b)
      run_avx2(src + k0, dst + k0, std::min(block_cols, n - k0), scales[b]);
    return;
  }
#endif
  (void)simd;
  dequantize_fp8_row(src, dst, n, scales, block_cols);
}

}  // namespace keel::cpu
