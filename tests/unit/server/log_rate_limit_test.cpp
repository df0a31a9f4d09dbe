#include "server/log_rate_limit.h"

#include <gtest/gtest.h>

using namespace keel::server;
using namespace std::chrono_literals;

TEST(LogRateLimit, BurstThenHoldsBackAndCountsWhatItHeld) {
  LogRateLimit lim(3, 60s);
  const auto t0 = LogRateLimit::Clock::now();
  std::uint64_t held = 99;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(lim.allow(&held, t0 + std::chrono::seconds(i)));
    EXPECT_EQ(held, 0u);
  }
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(lim.allow(&held, t0 + 10s));
  EXPECT_TRUE(lim.allow(&held, t0 + 61s));
  EXPECT_EQ(held, 1000u);
  EXPECT_TRUE(lim.allow(&held, t0 + 62s));
  EXPECT_EQ(held, 0u);
}
