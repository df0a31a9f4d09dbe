// The host-RAM tier: LRU eviction that skips pinned entries, slots handed out lowest
// first (so a batch lands contiguously), and drops of pinned entries deferred.
#include "kv/host_tier.h"

#include <gtest/gtest.h>

#include "tier_test_util.h"

namespace keel::test {
namespace {

HostTier make(std::int32_t slots, std::size_t bytes = 64) {
  return HostTier(static_cast<std::int64_t>(slots) * bytes, bytes,
                  [](std::size_t n) { return std::shared_ptr<std::byte[]>(new std::byte[n]()); });
}

TEST(HostTier, InsertReadyFindAndLruEviction) {
  HostTier t = make(3);
  std::vector<std::int32_t> s;
  for (int i = 0; i < 3; ++i) {
    s.push_back(t.insert(test_hash(i)));
    ASSERT_GE(s.back(), 0);
    EXPECT_EQ(t.find_ready(test_hash(i)), -1);  // filling is not findable
    t.mark_ready(s.back());
    t.unpin(s.back());
  }
  EXPECT_EQ(s, (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_TRUE(t.adjacent(0, 1));
  t.touch(t.find_ready(test_hash(0)));  // 1 is now the least recent
  const std::int32_t n = t.insert(test_hash(9));
  EXPECT_EQ(n, 1);
  EXPECT_EQ(t.find_ready(test_hash(1)), -1);
  EXPECT_GE(t.find_ready(test_hash(0)), 0);
  EXPECT_EQ(t.insert(test_hash(9)), -1);  // present
  t.check_invariants();
}

TEST(HostTier, PinnedEntriesAreNeverEvictedAndDropWaitsForUnpin) {
  HostTier t = make(2);
  const std::int32_t a = t.insert(test_hash(1));
  const std::int32_t b = t.insert(test_hash(2));
  t.mark_ready(a);
  t.mark_ready(b);  // both still pinned by insert
  EXPECT_EQ(t.insert(test_hash(3)), -1);
  t.unpin(b);
  EXPECT_EQ(t.insert(test_hash(3)), b);
  t.drop(a);  // pinned: slot stays taken
  EXPECT_FALSE(t.has(test_hash(1)));
  EXPECT_EQ(t.insert(test_hash(4)), -1);  // b pinned by insert(3), a dropped but pinned
  t.unpin(a);
  EXPECT_EQ(t.insert(test_hash(4)), a);
  t.check_invariants();
  t.clear();
  EXPECT_EQ(t.num_entries(), 0);
  t.check_invariants();
}

TEST(HostTier, MemoryIsTakenOnFirstUseOnly) {
  HostTier t(std::int64_t{1} << 30, 1 << 20,
             [](std::size_t n) { return std::shared_ptr<std::byte[]>(new std::byte[n]); });
  EXPECT_EQ(t.capacity(), 1024);
  EXPECT_EQ(t.allocated_bytes(), 0);
  t.insert(test_hash(1));
  EXPECT_EQ(t.allocated_bytes(), std::int64_t{64} << 20);
}

TEST(HostTier, ZeroCapacityRefuses) {
  HostTier t = make(0);
  EXPECT_EQ(t.insert(test_hash(1)), -1);
}

}  // namespace
}  // namespace keel::test
