#include "server/worker_watch.h"

#include <gtest/gtest.h>

using namespace keel::server;
using namespace std::chrono_literals;

TEST(WorkerWatch, StalledOnlyWhileRequestsWaitPastTheDeadline) {
  WorkerWatch w;
  const auto t0 = WorkerWatch::Clock::now();
  EXPECT_FALSE(w.stalled(1s, t0 + 1h));  // idle for an hour, nothing waits: fine
  w.posted(t0 + 1h);
  EXPECT_FALSE(w.stalled(1s, t0 + 1h + 500ms));
  auto s = w.stalled(1s, t0 + 1h + 1500ms);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->waiting, 1u);
  EXPECT_NEAR(s->seconds, 1.5, 1e-6);
  EXPECT_FALSE(w.stalled(0ms, t0 + 2h));  // 0: off
  w.taken(t0 + 1h + 2s);
  EXPECT_FALSE(w.stalled(1s, t0 + 3h));
  EXPECT_EQ(w.waiting(), 0u);
}

TEST(WorkerWatch, ATakeWhileOthersWaitRestartsTheClock) {
  WorkerWatch w;
  const auto t0 = WorkerWatch::Clock::now();
  w.posted(t0);
  w.posted(t0);
  w.taken(t0 + 900ms);
  EXPECT_FALSE(w.stalled(1s, t0 + 1500ms));
  auto s = w.stalled(1s, t0 + 2s);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->waiting, 1u);
}
