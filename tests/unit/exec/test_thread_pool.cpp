#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace keel {

TEST(ThreadPool, ParallelForCoversEachIndexOnce) {
  ThreadPool pool(3);
  for (std::int64_t n : {0, 1, 2, 7, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](std::int64_t a, std::int64_t b) {
      for (auto i = a; i < b; ++i) hits[i]++;
    });
    for (auto &h : hits) EXPECT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, GrainKeepsChunksWhole) {
  ThreadPool pool(4);
  std::atomic<int> bad{0};
  pool.parallel_for(
      100,
      [&](std::int64_t a, std::int64_t b) {
        if (a % 16 != 0 || (b % 16 != 0 && b != 100)) bad++;
      },
      16);
  EXPECT_EQ(bad.load(), 0);
}

TEST(ThreadPool, RunsOnEveryThreadAndRethrows) {
  ThreadPool pool(4);
  std::atomic<int> mask{0};
  pool.run([&](int t, int n) {
    EXPECT_EQ(n, 4);
    mask |= 1 << t;
  });
  EXPECT_EQ(mask.load(), 15);
  EXPECT_THROW(pool.run([](int t, int) {
    if (t == 2) throw std::runtime_error("boom");
  }),
               std::runtime_error);
  // Still usable after an exception.
  std::atomic<int> count{0};
  for (int i = 0; i < 200; ++i) pool.run([&](int, int) { count++; });
  EXPECT_EQ(count.load(), 800);
}

// Indices are claimed by whichever thread runs: a caller whose workers are asleep (or
// not scheduled, on a loaded machine) runs the region alone instead of waiting for them.
TEST(ThreadPool, CallerRunsTheIndicesNoWorkerClaimed) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  int alone = 0;
  for (int r = 0; r < 20 && alone == 0; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the worker goes to sleep
    std::atomic<int> on_caller{0};
    pool.run([&](int, int) { on_caller += std::this_thread::get_id() == caller; });
    alone += on_caller.load() == 2;
  }
  EXPECT_GT(alone, 0);
}

// Many short regions, each index exactly once and never twice at a time, whichever
// thread claims it.
TEST(ThreadPool, EachIndexOnceAcrossManyRegions) {
  ThreadPool pool(3);
  std::atomic<int> running[3] = {};
  std::atomic<int> overlaps{0};
  for (int r = 0; r < 20000; ++r) {
    int count[3] = {};
    pool.run([&](int t, int n) {
      EXPECT_EQ(n, 3);
      overlaps += running[t].fetch_add(1) != 0;
      ++count[t];
      running[t].fetch_sub(1);
    });
    ASSERT_EQ(count[0] + count[1] * 10 + count[2] * 100, 111) << r;
  }
  EXPECT_EQ(overlaps.load(), 0);
}

// Chunks finer than the threads: each once, and no slot used by two calls at a time.
TEST(ThreadPool, RunChunksGivesEachChunkOnceAndSlotsToOneCallAtATime) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(1000);
  std::atomic<int> in_slot[3] = {};
  std::atomic<int> bad{0};
  for (int r = 0; r < 50; ++r)
    pool.run_chunks(1000, [&](int c, int slot) {
      bad += slot < 0 || slot >= 3;
      bad += in_slot[slot].fetch_add(1) != 0;
      ++hits[c];
      in_slot[slot].fetch_sub(1);
    });
  for (auto &h : hits) EXPECT_EQ(h.load(), 50);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_THROW(pool.run_chunks(10,
                               [](int c, int) {
                                 if (c == 7) throw std::runtime_error("boom");
                               }),
               std::runtime_error);
}

TEST(ThreadPool, TwoPoolsLiveSideBySide) {
  ThreadPool a(2), b(3);
  std::atomic<long> sa{0}, sb{0};
  a.parallel_for(100, [&](std::int64_t x, std::int64_t y) { sa += y - x; });
  b.parallel_for(50, [&](std::int64_t x, std::int64_t y) { sb += y - x; });
  EXPECT_EQ(sa.load(), 100);
  EXPECT_EQ(sb.load(), 50);
  EXPECT_EQ(a.size(), 2);
  EXPECT_EQ(b.size(), 3);
}

}  // namespace keel
