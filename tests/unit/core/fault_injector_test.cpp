#include "core/fault_injector.h"

#include <gtest/gtest.h>

#include <cmath>

namespace keel {
namespace {

TEST(FaultInjector, NothingArmedTakesNothing) {
  FaultInjector f;
  EXPECT_FALSE(f.take_stall());
  EXPECT_FALSE(f.take_crash());
  EXPECT_FALSE(f.take_ssd_write_error());
  EXPECT_FALSE(f.take_ssd_read_corrupt());
  EXPECT_EQ(f.take_slow_store(), 0.0);
  EXPECT_TRUE(f.armed().empty());
}

TEST(FaultInjector, ShotsAreCountedPerKind) {
  FaultInjector f;
  f.arm({FaultKind::kSsdWriteError, std::nullopt, 2});
  f.arm({FaultKind::kCrashEngine, std::nullopt, 1});
  EXPECT_FALSE(f.take_ssd_read_corrupt());
  EXPECT_TRUE(f.take_ssd_write_error());
  EXPECT_TRUE(f.take_ssd_write_error());
  EXPECT_FALSE(f.take_ssd_write_error());
  ASSERT_EQ(f.armed().size(), 1u);
  EXPECT_EQ(f.armed()[0].kind, FaultKind::kCrashEngine);
  EXPECT_TRUE(f.take_crash());
  EXPECT_FALSE(f.take_crash());
}

TEST(FaultInjector, StallWithoutSecondsIsForeverAndRearmingReplaces) {
  FaultInjector f;
  f.arm({FaultKind::kStallStep, std::nullopt, 1});
  f.arm({FaultKind::kStallStep, 2.5, 1});
  ASSERT_EQ(f.armed().size(), 1u);
  EXPECT_EQ(f.take_stall(), 2.5);
  f.arm({FaultKind::kStallStep, std::nullopt, 1});
  auto s = f.take_stall();
  ASSERT_TRUE(s);
  EXPECT_TRUE(std::isinf(*s));
  f.arm({FaultKind::kSlowStore, 0.25, 3});
  f.disarm_all();
  EXPECT_EQ(f.take_slow_store(), 0.0);
}

TEST(FaultInjector, KindNamesRoundTrip) {
  for (FaultKind k : {FaultKind::kStallStep, FaultKind::kCrashEngine, FaultKind::kSsdWriteError,
                      FaultKind::kSsdReadCorrupt, FaultKind::kSlowStore})
    EXPECT_EQ(parse_fault_kind(fault_kind_name(k)), k);
  EXPECT_FALSE(parse_fault_kind("stall"));
}

}  // namespace
}  // namespace keel
