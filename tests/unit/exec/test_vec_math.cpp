#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "exec/cpu/vec_math.h"
#include "exec/sampler_top.h"

namespace keel::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The accuracy bound vec_math.h states, measured: a dense sweep of [-707, 0] plus the
// edges, in units in the last place of std::exp's result.
TEST(VecMath, ExpWithinTwoUlp) {
  double worst = 0;
  auto check = [&](double x) {
    const double want = std::exp(x), got = exp_nonpos(x);
    const double ulp = std::nextafter(want, 1e300) - want;
    worst = std::max(worst, std::abs(got - want) / ulp);
  };
  for (double x = -707.0; x <= 0.0; x += 7.07e-4) check(x);
  for (double x = -1e-3; x <= 0.0; x += 1e-9) check(x);
  check(0.0);
  check(-0.0);
  check(-706.9999);
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(exp_nonpos(0.0), 1.0);
  EXPECT_EQ(exp_nonpos(-708.0), 0.0);
  EXPECT_EQ(exp_nonpos(-std::numeric_limits<double>::infinity()), 0.0);
  EXPECT_EQ(exp_nonpos(std::numeric_limits<double>::quiet_NaN()), 0.0);
}

// The single-precision exp of the log-sum-exp, against std::exp in float.
TEST(VecMath, ExpfWithinTwoUlp) {
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 1.3e-4f) {
    const float want = std::exp(x), got = expf_nonpos(x);
    const float ulp = std::nextafter(want, 1e30f) - want;
    worst = std::max(worst, static_cast<double>(std::abs(got - want) / ulp));
  }
  EXPECT_LE(worst, 2.0);
  EXPECT_EQ(expf_nonpos(0.0f), 1.0f);
  EXPECT_EQ(expf_nonpos(-88.0f), 0.0f);
  EXPECT_EQ(expf_nonpos(-std::numeric_limits<float>::infinity()), 0.0f);
}

TEST(VecMath, ReductionsMatchScalarLoopsAtEveryLength) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (std::size_t n : {1u, 7u, 16u, 17u, 255u, 256u, 257u, 1000u, 151936u}) {
    std::vector<float> x(n);
    for (auto &v : x) v = nd(rng);
    if (n > 1) x[n / 3] = -kInf;
    if (n > 2) x[n - 1] = std::numeric_limits<float>::quiet_NaN();
    float mx = -kInf, mn = kInf;
    std::int64_t arg = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (x[i] > mx) mx = x[i], arg = static_cast<std::int64_t>(i);
      if (x[i] > -kInf && x[i] < mn) mn = x[i];
    }
    EXPECT_EQ(max_value(x), mx) << n;
    EXPECT_EQ(min_finite_value(x), mn) << n;
    EXPECT_EQ(first_argmax(x), arg) << n;
    EXPECT_EQ(max_and_min_finite(x).max, mx) << n;
    EXPECT_EQ(max_and_min_finite(x).min_finite, mn) << n;
    double s = 0;
    for (float v : x)
      if (v == v) s += std::exp(static_cast<double>(v) - mx);
    EXPECT_NEAR(log_sum_exp(x), mx + std::log(s), 1e-6) << n;
  }
  // Ties: the first index of the max.
  std::vector<float> t(1000, 1.0f);
  t[700] = t[300] = 2.0f;
  EXPECT_EQ(first_argmax(t), 300);
  std::vector<float> masked(40, -kInf);
  EXPECT_EQ(max_value(masked), -kInf);
  EXPECT_EQ(log_sum_exp(masked), -kInf);
  EXPECT_EQ(first_argmax(masked), 0);
}

TEST(SelectTop, EqualsThePrefixOfAFullSort) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t V = 1 + rng() % 20000;
    std::vector<float> x(V);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (auto &v : x) {
      v = std::round(nd(rng) * (trial % 2 ? 2.0f : 64.0f));  // ties, often
      if (rng() % 7 == 0) v = -kInf;
    }
    if (trial % 5 == 0) std::sort(x.begin(), x.end());  // ascending: the worst order
    std::vector<std::uint64_t> all;
    for (std::size_t i = 0; i < V; ++i) all.push_back(sample_key(x[i], static_cast<int>(i)));
    std::sort(all.begin(), all.end());
    for (std::int64_t k : {1, 5, 40, 1000, 30000}) {
      std::vector<std::uint64_t> got;
      select_top(x, k, got);
      const std::size_t n = std::min<std::size_t>(k, V);
      ASSERT_EQ(got.size(), n);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin())) << trial << " " << k;
    }
  }
}

}  // namespace
}  // namespace keel::cpu
