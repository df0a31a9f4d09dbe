#include "loadgen/stats.h"

#include <gtest/gtest.h>

#include <random>

namespace keel::loadgen {
namespace {

TEST(Percentile, InterpolatesBetweenClosestRanks) {
  const std::vector<double> v = {40, 10, 30, 20};  // sorted: 10 20 30 40
  EXPECT_DOUBLE_EQ(percentile(v, 0), 10);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 40);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 25);     // rank 1.5
  EXPECT_DOUBLE_EQ(percentile(v, 90), 37);     // rank 2.7
  EXPECT_NEAR(percentile(v, 99), 39.7, 1e-9);  // rank 2.97
}

TEST(Percentile, EdgeCases) {
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({7}, 1), 7);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(percentile({1, 2}, -5), 1);  // clamped
  EXPECT_DOUBLE_EQ(percentile({1, 2}, 500), 2);
}

TEST(Summarize, OrderedAndMatchesPercentile) {
  std::mt19937 rng(3);
  std::exponential_distribution<double> d(0.1);
  std::vector<double> v(1001);
  for (double &x : v) x = d(rng);
  const Summary s = summarize(v);
  EXPECT_EQ(s.count, 1001);
  EXPECT_LE(s.min, s.p50);
  EXPECT_LE(s.p50, s.p90);
  EXPECT_LE(s.p90, s.p99);
  EXPECT_LE(s.p99, s.max);
  EXPECT_DOUBLE_EQ(s.p90, percentile(v, 90));
  double sum = 0;
  for (double x : v) sum += x;
  EXPECT_NEAR(s.mean, sum / 1001, 1e-9);
}

TEST(Summarize, EmptyIsZero) {
  const Summary s = summarize({});
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.p99, 0);
}

}  // namespace
}  // namespace keel::loadgen
