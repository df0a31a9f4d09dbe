#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
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
