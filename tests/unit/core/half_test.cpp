#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/half.h"

namespace keel {
namespace {

TEST(Half, F16RoundTripsEveryFiniteValue) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    if ((bits & 0x7c00) == 0x7c00) continue;  // inf / NaN
    const float f = f16_to_f32(bits);
    EXPECT_EQ(f32_to_f16(f), bits) << "h=" << h;
  }
}

TEST(Half, F16KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);                     // overflow to inf
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 lies exactly between two bf16 values: ties go to the even mantissa.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, BlockSizes) {
  EXPECT_EQ(dtype_bytes(DType::kQ8_0, 64), 68);
  EXPECT_EQ(dtype_bytes(DType::kQ4_K, 512), 288);
  EXPECT_EQ(dtype_bytes(DType::kQ5_K, 512), 352);
  EXPECT_EQ(dtype_bytes(DType::kQ6_K, 256), 210);
  EXPECT_EQ(dtype_bytes(DType::kBF16, 10), 20);
  EXPECT_TRUE(dtype_is_quantized(DType::kQ4_0));
  EXPECT_FALSE(dtype_is_quantized(DType::kF16));
}

}  // namespace
}  // namespace keel
