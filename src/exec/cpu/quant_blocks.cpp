#include "exec/cpu/quant_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "formats/quant.h"

namespace keel::cpu {

namespace {
// std::lround's result (half away from zero) without its libm call, so the loop
// vectorizes: v - trunc(v) is exact in float.
inline float round_half_away(float v) {
  const float t = std::trunc(v);
  return std::fabs(v - t) >= 0.5f ? t + std::copysign(1.0f, v) : t;
}
}  // namespace

void dequantize_row(DType type, const std::byte *src, float *dst, std::int64_t n) {
  keel::dequantize_row(type, src, dst, n);
}

void quantize_row_q8_act(const float *src, BlockQ8Act *dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n / 32; ++i) {
    const float *x = src + i * 32;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[i].d = d;
    std::int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      dst[i].qs[j] = static_cast<std::int8_t>(round_half_away(x[j] * id));
      sum += dst[i].qs[j];
    }
    dst[i].sum = sum;
  }
}

}  // namespace keel::cpu
