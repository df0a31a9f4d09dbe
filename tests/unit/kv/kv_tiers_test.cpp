// KvTiers over an in-memory block store: blocks offloaded on eviction come back
// bit-exact from RAM and from SSD, in few transfers; a corrupt SSD read fails the
// restore (the caller recomputes); clear empties every tier.
#include "kv/kv_tiers.h"

#include <gtest/gtest.h>

#include "tier_test_util.h"

namespace keel::test {
namespace {

constexpr std::size_t kBytes = 1024;

struct Fixture {
  TempDir dir;
  MemKv kv{64, 16, kBytes};
  FaultInjector faults;
  std::unique_ptr<KvTiers> tiers;
  explicit Fixture(std::int64_t host_blocks, bool ssd, std::int32_t staging = 8) {
    KvTierConfig c;
    c.host_bytes = host_blocks * static_cast<std::int64_t>(kBytes);
    if (ssd) {
      c.ssd_dir = dir.path();
      c.ssd_bytes = std::int64_t{1} << 30;
    }
    tiers = std::make_unique<KvTiers>(
        c, kv, ModelFingerprint::of("m"), &faults, [] {}, staging);
  }
  // Device blocks [first, first + n) hold the payloads of hashes [0, n).
  std::vector<EvictedBlock> fill(int first, int n) {
    std::vector<EvictedBlock> ev;
    for (int i = 0; i < n; ++i) {
      fill_payload(test_hash(i), kv.block(first + i), kBytes);
      ev.push_back(EvictedBlock{BlockId{first + i}, test_hash(i)});
    }
    return ev;
  }
  std::optional<KvTiers::RestoreDone> restore(int first, int n) {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;
    for (int i = 0; i < n; ++i) {
      blocks.push_back(BlockId{first + i});
      hashes.push_back(test_hash(i));
      std::memset(kv.block(first + i), 0, kBytes);
    }
    tiers->start_restore(RequestId{7}, blocks, hashes);
    std::optional<KvTiers::RestoreDone> done;
    eventually_true([&] {
      for (auto &d : tiers->poll()) done = d;
      return done.has_value();
    });
    return done;
  }
  bool device_holds(int first, int n) {
    for (int i = 0; i < n; ++i)
      if (std::memcmp(kv.block(first + i), payload_of(test_hash(i), kBytes).data(), kBytes) != 0)
        return false;
    return true;
  }
};

TEST(KvTiers, RamRoundTripIsBitExactInOneTransferEachWay) {
  Fixture f(32, false);
  f.tiers->offload(f.fill(0, 10));
  EXPECT_EQ(f.kv.save_calls, 1);                  // consecutive host slots: one batched save
  EXPECT_FALSE(f.tiers->contains(test_hash(0)));  // not before the save is polled done
  f.tiers->poll();
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(f.tiers->contains(test_hash(i)));
  auto d = f.restore(20, 10);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->ok);
  EXPECT_EQ(d->from_host, 10);
  EXPECT_EQ(f.kv.load_calls, 1);
  EXPECT_TRUE(f.device_holds(20, 10));
  EXPECT_EQ(f.tiers->host_stats().hit_blocks, 10);
  EXPECT_EQ(f.tiers->host_stats().stored_blocks, 10);
  f.tiers->offload(f.fill(0, 10));  // already in RAM: not saved again
  EXPECT_EQ(f.kv.save_calls, 1);
}

TEST(KvTiers, SsdRoundTripAfterRamIsDropped) {
  Fixture f(16, true);
  f.tiers->offload(f.fill(0, 12));
  f.tiers->poll();  // saves done: writes queued
  ASSERT_TRUE(
      f.tiers->ssd()->wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  f.tiers->poll();
  EXPECT_EQ(f.tiers->ssd_stats().stored_blocks, 12);
  f.tiers->clear_host();
  EXPECT_TRUE(f.tiers->contains(test_hash(5)));  // on SSD
  auto d = f.restore(30, 12);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->ok);
  EXPECT_EQ(d->from_ssd, 12);
  EXPECT_TRUE(f.device_holds(30, 12));
  EXPECT_EQ(f.tiers->host().find_ready(test_hash(3)) >= 0, true);  // promoted to RAM
  f.tiers->clear();
  EXPECT_FALSE(f.tiers->contains(test_hash(3)));
}

TEST(KvTiers, CorruptSsdReadFailsTheRestore) {
  Fixture f(16, true);
  f.tiers->offload(f.fill(0, 4));
  f.tiers->poll();
  ASSERT_TRUE(
      f.tiers->ssd()->wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  f.tiers->poll();
  f.tiers->clear_host();
  f.faults.arm(FaultSpec{FaultKind::kSsdReadCorrupt, std::nullopt, 1});
  auto d = f.restore(30, 4);
  ASSERT_TRUE(d.has_value());
  EXPECT_FALSE(d->ok);
  EXPECT_EQ(f.tiers->ssd_stats().errors, 1);
  EXPECT_FALSE(f.tiers->contains(test_hash(0)) && f.tiers->contains(test_hash(1)) &&
               f.tiers->contains(test_hash(2)) && f.tiers->contains(test_hash(3)));
  f.tiers->host().check_invariants();
}

TEST(KvTiers, RestoreLongerThanTheStagingRoomIsRestoredInPart) {
  Fixture f(0, true, 4);  // no RAM tier: 4 staging slots
  EXPECT_EQ(f.tiers->host().capacity(), 4);
  const auto ev = f.fill(0, 12);
  f.tiers->flush(ev, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  EXPECT_EQ(f.tiers->ssd_stats().stored_blocks, 12);
  f.tiers->clear_host();
  auto d = f.restore(30, 12);
  ASSERT_TRUE(d.has_value());
  EXPECT_TRUE(d->ok);
  EXPECT_EQ(d->from_ssd, 4);  // the leading blocks that fit
  EXPECT_TRUE(f.device_holds(30, 4));
  f.tiers->host().check_invariants();
}

TEST(KvTiers, CancelledRestoreReportsNothingAndReleasesSlots) {
  Fixture f(8, false);
  f.tiers->offload(f.fill(0, 8));
  f.tiers->poll();
  std::vector<BlockId> blocks{BlockId{40}};
  std::vector<BlockHash> hashes{test_hash(0)};
  f.tiers->start_restore(RequestId{9}, blocks, hashes);
  f.tiers->cancel_restore(RequestId{9});
  EXPECT_TRUE(f.tiers->poll().empty());
  EXPECT_FALSE(f.tiers->busy());
  f.tiers->host().check_invariants();
  // Every slot is evictable again: 8 new blocks fit.
  std::vector<EvictedBlock> ev;
  for (int i = 0; i < 8; ++i) ev.push_back(EvictedBlock{BlockId{i}, test_hash(100 + i)});
  f.tiers->offload(ev);
  f.tiers->poll();
  EXPECT_EQ(f.tiers->host_stats().dropped, 0);
}

}  // namespace
}  // namespace keel::test
