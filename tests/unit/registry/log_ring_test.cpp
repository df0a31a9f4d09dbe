#include "registry/log_ring.h"

#include <gtest/gtest.h>

#include "registry/log.h"

namespace keel {
namespace {

TEST(LogRing, KeepsOnlyTheLastLinesInOrder) {
  LogRing ring(3);
  for (int i = 1; i <= 5; ++i) ring.add("info", "line " + std::to_string(i));
  const auto lines = ring.since(0, 100);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].text, "line 3");
  EXPECT_EQ(lines[0].seq, 3u);
  EXPECT_EQ(lines[2].text, "line 5");
  EXPECT_EQ(lines[2].seq, 5u);
}

TEST(LogRing, SinceSkipsLinesAlreadySeenAndLimitKeepsTheNewest) {
  LogRing ring(10);
  for (int i = 1; i <= 6; ++i) ring.add("warn", std::to_string(i));
  auto after4 = ring.since(4, 100);
  ASSERT_EQ(after4.size(), 2u);
  EXPECT_EQ(after4[0].text, "5");
  auto newest = ring.since(0, 2);
  ASSERT_EQ(newest.size(), 2u);
  EXPECT_EQ(newest[0].text, "5");
  EXPECT_EQ(newest[1].text, "6");
  EXPECT_TRUE(ring.since(6, 100).empty());
}

TEST(LogRing, LoggerKeepsTheLinesItWritesAndNotTheFilteredOnes) {
  Logger log(LogLevel::kWarn, "test");
  auto ring = std::make_shared<LogRing>(8);
  log.keep_in(ring);
  log.log(LogLevel::kError, "disk %s", "full");
  log.log(LogLevel::kInfo, "not kept");
  const auto lines = ring->since(0, 8);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].level, "error");
  EXPECT_EQ(lines[0].text, "disk full");
  EXPECT_GT(lines[0].unix_time, 1.6e9);
}

}  // namespace
}  // namespace keel
