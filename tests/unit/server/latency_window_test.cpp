#include "server/latency_window.h"

#include <gtest/gtest.h>

namespace keel::server {
namespace {

using std::chrono::seconds;

TEST(LatencyWindow, PercentilesOfTheSamplesInTheWindow) {
  LatencyWindow w(seconds(60));
  const auto t0 = LatencyWindow::Clock::now();
  for (int i = 1; i <= 10; ++i) w.add(i, 10.0 * i, t0);
  const auto s = w.summary(t0);
  EXPECT_EQ(s.requests, 10u);
  EXPECT_DOUBLE_EQ(s.ttft_p50_ms, 6);  // nearest rank of 1..10 at 0.5 (index 4.5 -> 5)
  EXPECT_DOUBLE_EQ(s.ttft_p90_ms, 9);
  EXPECT_DOUBLE_EQ(s.e2e_p50_ms, 60);
  EXPECT_DOUBLE_EQ(s.e2e_p90_ms, 90);
}

TEST(LatencyWindow, DropsSamplesOlderThanTheWindowAndBeyondCapacity) {
  LatencyWindow w(seconds(60), 3);
  const auto t0 = LatencyWindow::Clock::now();
  w.add(100, 100, t0);
  w.add(1, 1, t0 + seconds(50));
  EXPECT_EQ(w.summary(t0 + seconds(50)).requests, 2u);
  const auto later = w.summary(t0 + seconds(61));
  EXPECT_EQ(later.requests, 1u);
  EXPECT_DOUBLE_EQ(later.ttft_p90_ms, 1);
  for (int i = 0; i < 5; ++i) w.add(7, 7, t0 + seconds(62));
  EXPECT_EQ(w.summary(t0 + seconds(62)).requests, 3u);
  EXPECT_EQ(w.summary(t0 + seconds(200)).requests, 0u);
  EXPECT_DOUBLE_EQ(w.summary(t0 + seconds(200)).e2e_p50_ms, 0);
}

}  // namespace
}  // namespace keel::server
