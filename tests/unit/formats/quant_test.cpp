#include "formats/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "core/half.h"

namespace keel {
namespace {

std::vector<float> normal(std::size_t n, unsigned seed, float std = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, std);
  std::vector<float> v(n);
  for (auto &x : v) x = dist(rng);
  return v;
}

std::vector<float> round_trip(DType t, const std::vector<float> &x) {
  std::vector<std::byte> q(
      static_cast<std::size_t>(dtype_bytes(t, static_cast<std::int64_t>(x.size()))));
  quantize_row(t, x.data(), q.data(), static_cast<std::int64_t>(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), static_cast<std::int64_t>(x.size()));
  return y;
}

double rel_rms(const std::vector<float> &x, const std::vector<float> &y) {
  double e = 0, s = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    e += (x[i] - y[i]) * (x[i] - y[i]);
    s += x[i] * x[i];
  }
  return std::sqrt(e / s);
}

TEST(Quant, Q8_0KnownBlock) {
  std::uint8_t block[34] = {};
  const std::uint16_t d = f32_to_f16(0.5f);
  std::memcpy(block, &d, 2);
  const std::int8_t qs[4] = {-3, 0, 5, 127};
  std::memcpy(block + 2, qs, 4);
  float y[32];
  dequantize_row(DType::kQ8_0, block, y, 32);
  EXPECT_EQ(y[0], -1.5f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 2.5f);
  EXPECT_EQ(y[3], 63.5f);
  EXPECT_EQ(y[31], 0.0f);
}

TEST(Quant, Q4_0KnownBlock) {
  std::uint8_t block[18];
  const std::uint16_t d = f32_to_f16(2.0f);
  std::memcpy(block, &d, 2);
  std::memset(block + 2, 0x88, 16);  // every code 8: zero
  block[2] = 0x9F;                   // element 0: 15 - 8 = 7; element 16: 9 - 8 = 1
  block[17] = 0x30;                  // element 15: 0 - 8; element 31: 3 - 8
  float y[32];
  dequantize_row(DType::kQ4_0, block, y, 32);
  EXPECT_EQ(y[0], 14.0f);
  EXPECT_EQ(y[16], 2.0f);
  EXPECT_EQ(y[15], -16.0f);
  EXPECT_EQ(y[31], -10.0f);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(Quant, Q4_KKnownBlock) {
  std::uint8_t block[144] = {};
  const std::uint16_t d = f32_to_f16(1.0f), dmin = f32_to_f16(0.5f);
  std::memcpy(block, &d, 2);
  std::memcpy(block + 2, &dmin, 2);
  std::uint8_t *scales = block + 4;
  std::uint8_t *qs = block + 16;
  scales[0] = 2 | (1 << 6);  // sub-block 0 scale 2; bit 4 of sub-block 4's scale
  scales[4] = 3;             // sub-block 0 min 3
  scales[1] = 1;             // sub-block 1 scale 1, min 0
  scales[8] = 0x01;          // sub-block 4: scale low bits 1 (+16 from scales[0]), min 0
  qs[0] = 0x5 | (0x7 << 4);  // element 0 (sub-block 0) = 5, element 32 (sub-block 1) = 7
  qs[64] = 0x02;             // element 128 (sub-block 4) = 2
  float y[256];
  dequantize_row(DType::kQ4_K, block, y, 256);
  EXPECT_EQ(y[0], 1.0f * 2 * 5 - 0.5f * 3);
  EXPECT_EQ(y[1], -1.5f);  // code 0: just the min
  EXPECT_EQ(y[32], 7.0f);
  EXPECT_EQ(y[128], 34.0f);
  EXPECT_EQ(y[255], 0.0f);
}

TEST(Quant, Q6_KKnownBlock) {
  std::uint8_t block[210] = {};
  std::uint8_t *ql = block, *qh = block + 128;
  auto *sc = reinterpret_cast<std::int8_t *>(block + 192);
  const std::uint16_t d = f32_to_f16(0.25f);
  std::memcpy(block + 208, &d, 2);
  for (int i = 0; i < 16; ++i) sc[i] = 1;
  sc[0] = 4;
  sc[4] = -2;
  ql[0] = 0x3 | (0x1 << 4);  // element 0 low bits 3, element 64 low bits 1
  qh[0] = 2;                 // element 0 high bits 2 -> code 35; element 64 high bits 0 -> 1
  ql[64] = 0x0;              // element 128: code 0 | high bits from qh[32]
  qh[32] = 3;                // -> 48 - 32 = 16
  float y[256];
  dequantize_row(DType::kQ6_K, block, y, 256);
  EXPECT_EQ(y[0], 0.25f * 4 * 3);
  EXPECT_EQ(y[64], 0.25f * -2 * -31);
  EXPECT_EQ(y[128], 0.25f * 1 * 16);
  EXPECT_EQ(y[1], 0.25f * 4 * -32);
}

// Q5_K by hand: d, dmin, Q4_K's packed scales, qh (the fifth bit), qs (nibbles).
TEST(Quant, Q5KBlockLayout) {
  std::uint8_t block[176] = {};
  const std::uint16_t d = f32_to_f16(0.5f), dmin = f32_to_f16(0.25f);
  std::memcpy(block, &d, 2);
  std::memcpy(block + 2, &dmin, 2);
  std::uint8_t *scales = block + 4, *qh = block + 16, *qs = block + 48;
  scales[0] = 2;                  // sub-block 0: scale 2
  scales[4] = 1;                  //              min 1
  scales[1] = 3;                  // sub-block 1: scale 3, min 0
  scales[8] = 0x05 | (0x2 << 4);  // sub-block 4: scale 5, min 2 (low 4 bits of each)
  qs[0] = 0x3 | (0x7 << 4);       // element 0 low bits 3; element 32 low bits 7
  qh[0] = 0x1;                    // element 0 fifth bit (bit 0); element 32's (bit 1) clear
  qs[64 + 5] = 0xF;               // element 128 + 5 low bits 15
  qh[5] = 0x1 << 4;               // its fifth bit: pair 2, first sub-block -> bit 4
  float y[256];
  dequantize_row(DType::kQ5_K, block, y, 256);
  EXPECT_EQ(y[0], 0.5f * 2 * 19 - 0.25f * 1);
  EXPECT_EQ(y[32], 0.5f * 3 * 7);
  EXPECT_EQ(y[133], 0.5f * 5 * 31 - 0.25f * 2);
  EXPECT_EQ(y[1], 0.5f * 2 * 0 - 0.25f * 1);
}

TEST(Quant, RoundTripErrorBounds) {
  const auto x = normal(4096, 7);
  struct Case {
    DType t;
    double max_rel_rms;
  };
  for (auto [t, bound] :
       {Case{DType::kF16, 1e-3}, Case{DType::kBF16, 5e-3}, Case{DType::kQ8_0, 0.01},
        Case{DType::kQ6_K, 0.04}, Case{DType::kQ5_K, 0.07}, Case{DType::kQ4_K, 0.12},
        Case{DType::kQ4_0, 0.15}}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const auto y = round_trip(t, x);
    EXPECT_LT(rel_rms(x, y), bound);
    EXPECT_GT(rel_rms(x, y), 0.0);  // lossy: a copy would be a bug in the test
  }
  // The fifth bit halves Q4_K's step: Q5_K is the more accurate of the two.
  EXPECT_LT(rel_rms(x, round_trip(DType::kQ5_K, x)), 0.6 * rel_rms(x, round_trip(DType::kQ4_K, x)));
  // Per-element bounds of the 32-blocks: half a step (Q8_0), one step (Q4_0, clipping).
  const auto y8 = round_trip(DType::kQ8_0, x), y4 = round_trip(DType::kQ4_0, x);
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    for (int j = 0; j < 32; ++j) {
      const std::size_t i = b * 32 + j;
      EXPECT_LE(std::fabs(x[i] - y8[i]), amax / 254 * 1.01f + 1e-3f * amax) << i;
      EXPECT_LE(std::fabs(x[i] - y4[i]), amax / 8 * 1.01f) << i;
    }
  }
}

TEST(Quant, ZerosAndScaleInvariance) {
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const auto z = round_trip(t, std::vector<float>(512, 0.0f));
    for (float v : z) EXPECT_EQ(v, 0.0f);
    // Small weights (std 0.02, as make-model writes) keep their relative accuracy.
    const auto x = normal(512, 3, 0.02f);
    EXPECT_LT(rel_rms(x, round_trip(t, x)), 0.15);
  }
}

TEST(Quant, RejectsPartialBlocks) {
  float x[33] = {};
  std::byte out[64];
  EXPECT_THROW(quantize_row(DType::kQ8_0, x, out, 33), Error);
  EXPECT_THROW(dequantize_row(DType::kQ4_K, out, x, 32), Error);
  EXPECT_THROW(dequantize_row(DType::kI32, out, x, 1), Error);
}

}  // namespace
}  // namespace keel
