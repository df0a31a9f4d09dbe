// RoPE frequency tables (host code: runs without a GPU) against the HF formulas.
#include "exec/cuda/rope_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace keel::cuda {
namespace {

ModelConfig base(RopeScaling::Type type, double factor) {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = type;
  c.rope_scaling.factor = factor;
  return c;
}

TEST(RopeTable, PlainAndLinear) {
  const auto plain = make_rope_table(base(RopeScaling::Type::kNone, 1.0));
  const auto lin = make_rope_table(base(RopeScaling::Type::kLinear, 4.0));
  ASSERT_EQ(plain.inv_freq.size(), 64u);
  EXPECT_FLOAT_EQ(plain.inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(plain.inv_freq[10], static_cast<float>(1.0 / std::pow(500000.0, 20.0 / 128.0)));
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(lin.inv_freq[i], plain.inv_freq[i] / 4.0f);
  EXPECT_EQ(plain.mscale, 1.0f);
}

TEST(RopeTable, Llama3KeepsHighAndScalesLowFrequencies) {
  // Llama 3.1: factor 8, low 1, high 4, original context 8192.
  auto c = base(RopeScaling::Type::kLlama3, 8.0);
  c.rope_scaling.original_max_position = 8192;
  const auto plain = make_rope_table(base(RopeScaling::Type::kNone, 1.0));
  const auto t = make_rope_table(c);
  int kept = 0, scaled = 0, smoothed = 0;
  for (int i = 0; i < 64; ++i) {
    const double wavelen = 2 * std::numbers::pi / plain.inv_freq[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_FLOAT_EQ(t.inv_freq[i], plain.inv_freq[i]);
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(t.inv_freq[i], plain.inv_freq[i] / 8.0f);
      ++scaled;
    } else {
      EXPECT_LT(t.inv_freq[i], plain.inv_freq[i]);
      EXPECT_GT(t.inv_freq[i], plain.inv_freq[i] / 8.0f);
      ++smoothed;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(RopeTable, YarnRampsAndScalesAttention) {
  auto c = base(RopeScaling::Type::kYarn, 4.0);
  c.rope_theta = 10000.0;
  c.rope_scaling.original_max_position = 4096;
  const auto plain = [&] {
    auto p = c;
    p.rope_scaling.type = RopeScaling::Type::kNone;
    return make_rope_table(p);
  }();
  const auto t = make_rope_table(c);
  EXPECT_NEAR(t.mscale, 0.1 * std::log(4.0) + 1.0, 1e-6);
  // Highest frequencies extrapolate (unchanged), lowest interpolate (divided by factor).
  EXPECT_FLOAT_EQ(t.inv_freq[0], plain.inv_freq[0]);
  EXPECT_FLOAT_EQ(t.inv_freq[63], plain.inv_freq[63] / 4.0f);
  for (int i = 1; i < 64; ++i)
    EXPECT_LE(t.inv_freq[i] / plain.inv_freq[i], t.inv_freq[i - 1] / plain.inv_freq[i - 1] + 1e-6);
  c.rope_scaling.attention_factor = 1.5;
  EXPECT_FLOAT_EQ(make_rope_table(c).mscale, 1.5f);
}

TEST(RopeTable, RejectsOddHeadDim) {
  auto c = base(RopeScaling::Type::kNone, 1.0);
  c.head_dim = 7;
  EXPECT_THROW(make_rope_table(c), Error);
}

}  // namespace
}  // namespace keel::cuda
