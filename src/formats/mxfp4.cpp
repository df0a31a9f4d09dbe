#include "formats/mxfp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace keel {

namespace {
// Magnitudes of the e2m1 codes 0..7: exponent bits e1 e0, mantissa bit m.
constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
}  // namespace

float e2m1_to_float(std::uint8_t code) {
  const float mag = kE2m1[code & 7];
  return (code & 8) ? -mag : mag;
}

float e8m0_to_float(std::uint8_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);  // 2^-127 is a float subnormal
}

void dequantize_mxfp4(const std::byte *src, float *dst, std::int64_t n) {
  const auto *b = reinterpret_cast<const std::uint8_t *>(src);
  for (std::int64_t i = 0; i < n / kMxfp4BlockElems; ++i, b += kMxfp4BlockBytes) {
    const float d = e8m0_to_float(b[0]);
    float *y = dst + i * kMxfp4BlockElems;
    for (int j = 0; j < 16; ++j) {
      y[j] = e2m1_to_float(b[1 + j] & 0xF) * d;
      y[j + 16] = e2m1_to_float(b[1 + j] >> 4) * d;
    }
  }
}

namespace {
// The code of the e2m1 value nearest v, ties to the even code (mantissa bit 0): a count of
// the midpoints 0.25, 0.75, ..., 5 that |v| passes (>= where the upper code is even).
std::uint8_t nearest_e2m1(float v) {
  const float a = std::fabs(v);
  const int c = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) +
                (a > 5.0f);
  return static_cast<std::uint8_t>(c | (std::signbit(v) && c != 0 ? 8 : 0));
}
}  // namespace

void quantize_mxfp4(const float *src, std::byte *dst, std::int64_t n) {
  auto *b = reinterpret_cast<std::uint8_t *>(dst);
  for (std::int64_t i = 0; i < n / kMxfp4BlockElems; ++i, b += kMxfp4BlockBytes) {
    const float *x = src + i * kMxfp4BlockElems;
    float amax = 0.0f;
    for (int j = 0; j < kMxfp4BlockElems; ++j) amax = std::max(amax, std::fabs(x[j]));
    // The smallest power of two s with amax / s <= 6.
    int e = 0;
    if (amax > 0.0f) {
      int ex = 0;
      const double m = std::frexp(static_cast<double>(amax) / 6.0, &ex);  // m in [0.5, 1)
      e = std::clamp((m == 0.5 ? ex - 1 : ex) + 127, 0, 254);
    }
    b[0] = static_cast<std::uint8_t>(e);
    const float inv = 1.0f / e8m0_to_float(b[0]);
    std::uint8_t q[kMxfp4BlockElems];
    for (int j = 0; j < kMxfp4BlockElems; ++j) q[j] = nearest_e2m1(x[j] * inv);
    for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<std::uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

void repack_gpt_oss_mxfp4(const std::uint8_t *nibbles, const std::uint8_t *scales, std::byte *dst,
                          std::int64_t blocks) {
  auto *b = reinterpret_cast<std::uint8_t *>(dst);
  for (std::int64_t i = 0; i < blocks; ++i, b += kMxfp4BlockBytes, nibbles += 16) {
    std::uint8_t q[kMxfp4BlockElems];
    for (int j = 0; j < 16; ++j) {
      q[2 * j] = nibbles[j] & 0xF;
      q[2 * j + 1] = nibbles[j] >> 4;
    }
    b[0] = scales[i];
    for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<std::uint8_t>(q[j] | (q[j + 16] << 4));
  }
}

void unpack_gpt_oss_mxfp4(const std::byte *src, std::uint8_t *nibbles, std::uint8_t *scales,
                          std::int64_t blocks) {
  const auto *b = reinterpret_cast<const std::uint8_t *>(src);
  for (std::int64_t i = 0; i < blocks; ++i, b += kMxfp4BlockBytes, nibbles += 16) {
    std::uint8_t q[kMxfp4BlockElems];
    for (int j = 0; j < 16; ++j) {
      q[j] = b[1 + j] & 0xF;
      q[j + 16] = b[1 + j] >> 4;
    }
    scales[i] = b[0];
    for (int j = 0; j < 16; ++j)
      nibbles[j] = static_cast<std::uint8_t>(q[2 * j] | (q[2 * j + 1] << 4));
  }
}

}  // namespace keel
