// ThreadOwner: the owner-thread check every device launch and engine entry point runs.
#include "core/thread_owner.h"

#include <gtest/gtest.h>

#include <thread>

namespace keel {
namespace {

TEST(ThreadOwner, TheMakingThreadOwnsIt) {
  const ThreadOwner owner;
  EXPECT_EQ(owner.id(), std::this_thread::get_id());
  EXPECT_TRUE(owner.is_current());
  owner.check("launch_here");  // returns: the owner may
  bool other_is_current = true;
  std::thread([&] { other_is_current = owner.is_current(); }).join();
  EXPECT_FALSE(other_is_current);
}

TEST(ThreadOwnerDeathTest, AForeignThreadIsFatalAndNamesTheCaller) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const ThreadOwner owner;
  EXPECT_DEATH(std::thread([&] { owner.check("launch_swiglu"); }).join(),
               "fatal: launch_swiglu called from thread .* owned by thread");
}

}  // namespace
}  // namespace keel
