// Which load progress reports become log lines: each phase's first, its tenths no more
// often than the gap, its end, and a phase without a total now and then.
#include "registry/progress_log.h"

#include <gtest/gtest.h>

namespace keel {
namespace {

using namespace std::chrono_literals;
using Clock = ProgressLogPacer::Clock;

TEST(ProgressLog, ACountedPhaseLogsItsStartTenthsAtMostEveryGapAndItsEnd) {
  ProgressLogPacer pacer(2s, 10s);
  const Clock::time_point t0{};
  int lines = 0;
  // 1,000 reports over 10 s: one every 10 ms, done going 0..999 of 1000, then the end.
  for (int i = 0; i < 1000; ++i)
    lines += pacer.should_log({"reading weights", i, 1000, "bytes"}, t0 + i * 10ms);
  lines += pacer.should_log({"reading weights", 1000, 1000, "bytes"}, t0 + 10001ms);
  // The start, then a new tenth at 2 s, 4 s, 6 s, 8 s (the gap holds back the others),
  // and the end.
  EXPECT_EQ(lines, 6);
  // The end is logged once, even if reported again.
  EXPECT_FALSE(pacer.should_log({"reading weights", 1000, 1000, "bytes"}, t0 + 30s));
}

TEST(ProgressLog, EveryNewPhaseIsLoggedAtOnce) {
  ProgressLogPacer pacer(2s, 10s);
  const Clock::time_point t0{};
  EXPECT_TRUE(pacer.should_log({"reading weights", 0, 10, "bytes"}, t0));
  EXPECT_FALSE(pacer.should_log({"reading weights", 1, 10, "bytes"}, t0 + 1ms));
  EXPECT_TRUE(pacer.should_log({"preparing weights", 0, 0, ""}, t0 + 2ms));
  EXPECT_TRUE(pacer.should_log({"rebuilding cache index", 0, 0, "blocks"}, t0 + 3ms));
  EXPECT_TRUE(pacer.should_log({"rebuilding cache index", 40, 40, "blocks"}, t0 + 4ms));  // its end
}

TEST(ProgressLog, APhaseWithoutATotalIsLoggedEveryQuietGap) {
  ProgressLogPacer pacer(2s, 10s);
  const Clock::time_point t0{};
  int lines = 0;
  for (int s = 0; s <= 35; ++s)
    lines += pacer.should_log({"uploading to device", 0, 0, ""}, t0 + std::chrono::seconds(s));
  EXPECT_EQ(lines, 4);  // at 0, 10, 20 and 30 s
  pacer.reset();        // a new load starts over
  EXPECT_TRUE(pacer.should_log({"uploading to device", 0, 0, ""}, t0 + 36s));
}

TEST(ProgressLog, DescribesCountedAndOpenPhases) {
  EXPECT_EQ(describe_progress({"rebuilding cache index", 120, 0, "blocks"}),
            "rebuilding cache index (120 blocks)");
  EXPECT_EQ(describe_progress({"uploading to device", 0, 0, ""}), "uploading to device");
  const std::string w = describe_progress({"reading weights", 1, 4, "bytes"});
  EXPECT_EQ(w.rfind("reading weights 25% (", 0), 0u) << w;
  EXPECT_NE(w.find(" of "), std::string::npos) << w;
}

}  // namespace
}  // namespace keel
