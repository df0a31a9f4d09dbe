#include "server/stop_matcher.h"

#include <gtest/gtest.h>

using keel::server::StopMatcher;

TEST(StopMatcher, PassesTextThroughWithoutStops) {
  StopMatcher m({});
  EXPECT_EQ(m.push("hello").emit, "hello");
  EXPECT_EQ(m.flush().emit, "");
}

TEST(StopMatcher, HoldsBackAPossibleStartAndReleasesIt) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("abc ST").emit, "abc ");  // "ST" may begin "STOP"
  auto r = m.push("x");
  EXPECT_FALSE(r.hit);
  EXPECT_EQ(r.emit, "STx");
  EXPECT_EQ(m.push("S").emit, "");
  EXPECT_EQ(m.flush().emit, "S");
}

TEST(StopMatcher, FindsAStopSplitOverPushesAndDropsTheRest) {
  StopMatcher m({"\n\n", "END"});
  EXPECT_EQ(m.push("one E").emit, "one ");
  auto r = m.push("NDtwo");
  EXPECT_TRUE(r.hit);
  EXPECT_EQ(r.matched, "END");
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(m.push("more").emit.empty());
  EXPECT_TRUE(m.flush().emit.empty());
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"cd", "b"});
  auto r = m.push("abcd");
  EXPECT_TRUE(r.hit);
  EXPECT_EQ(r.matched, "b");
  EXPECT_EQ(r.emit, "a");
}

// min_tokens: text pushed before the request has min_tokens tokens is not searched for a
// whole stop string; a stop that ends after it still matches.
TEST(StopMatcher, UnmatchedTextPassesAWholeStopAndHoldsAStart) {
  StopMatcher m({"END"});
  auto r = m.push("one END two E", /*match=*/false);
  EXPECT_FALSE(r.hit);
  EXPECT_EQ(r.emit, "one END two ");  // "E" may begin "END"
  r = m.push("ND three");
  EXPECT_TRUE(r.hit);
  EXPECT_EQ(r.emit, "");
}
