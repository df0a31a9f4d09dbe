// Rotary embeddings for the MoE families: GLM-4.5's partial rotary (only the first
// partial_rotary_factor of each head turns) and gpt-oss's YaRN without truncation of the
// correction range, against the definitions computed here in double.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "exec/cpu/rope.h"

namespace keel::cpu {
namespace {

TEST(RopePartial, RotatesOnlyTheFirstPartOfEachHead) {
  ModelConfig c;
  c.head_dim = 32;
  c.rope_theta = 10000.0;
  c.partial_rotary_factor = 0.5;
  const RopeTable t = make_rope_table(c);
  ASSERT_EQ(t.rot_dim, 16);
  ASSERT_EQ(t.inv_freq.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_NEAR(t.inv_freq[i], std::pow(10000.0, -2.0 * i / 16.0), 1e-6 * t.inv_freq[i]) << i;

  // Two heads of 32 at position 5: the first 16 dims of each turn in (i, i + 8) pairs,
  // the last 16 pass through.
  std::vector<float> x(64), y;
  for (int i = 0; i < 64; ++i) x[i] = 0.1f * static_cast<float>(i + 1);
  y = x;
  const std::int32_t pos = 5;
  apply_rope(t, y.data(), 1, 2, 32, &pos);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 8; ++i) {
      const double a = pos * std::pow(10000.0, -2.0 * i / 16.0);
      const double u = x[h * 32 + i], v = x[h * 32 + i + 8];
      EXPECT_NEAR(y[h * 32 + i], u * std::cos(a) - v * std::sin(a), 1e-5);
      EXPECT_NEAR(y[h * 32 + i + 8], v * std::cos(a) + u * std::sin(a), 1e-5);
    }
  for (int h = 0; h < 2; ++h)
    for (int i = 16; i < 32; ++i) EXPECT_EQ(y[h * 32 + i], x[h * 32 + i]) << h << "," << i;
}

// gpt-oss: head_dim 64, theta 150000, factor 32 over 4096 positions, beta 32 / 1,
// truncate false.
std::vector<double> yarn_reference(bool truncate) {
  const double dim = 64, base = 150000, factor = 32, orig = 4096;
  auto corr = [&](double rot) {
    return dim * std::log(orig / (rot * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = corr(32), high = corr(1);
  if (truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  std::vector<double> out;
  for (int i = 0; i < 32; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrap = std::pow(base, -2.0 * i / dim), interp = extrap / factor;
    out.push_back(interp * ramp + extrap * (1 - ramp));
  }
  return out;
}

TEST(RopeYarn, TruncateFalseKeepsTheFractionalCorrectionRange) {
  ModelConfig c;
  c.head_dim = 64;
  c.rope_theta = 150000.0;
  c.rope_scaling.type = RopeScaling::Type::kYarn;
  c.rope_scaling.factor = 32;
  c.rope_scaling.original_max_position = 4096;
  c.rope_scaling.beta_fast = 32;
  c.rope_scaling.beta_slow = 1;
  for (const bool truncate : {true, false}) {
    c.rope_scaling.truncate = truncate;
    const RopeTable t = make_rope_table(c);
    const auto want = yarn_reference(truncate);
    ASSERT_EQ(t.inv_freq.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(t.inv_freq[i], want[i], 1e-6 * want[i]) << "truncate " << truncate << " " << i;
    EXPECT_NEAR(t.attention_scaling, 0.1 * std::log(32.0) + 1.0, 1e-6);
  }
  // The flag matters for these parameters: some frequency differs by more than rounding.
  const auto a = yarn_reference(true), b = yarn_reference(false);
  double most = 0;
  for (std::size_t i = 0; i < a.size(); ++i) most = std::max(most, std::abs(a[i] - b[i]) / a[i]);
  EXPECT_GT(most, 1e-3);
}

}  // namespace
}  // namespace keel::cpu
