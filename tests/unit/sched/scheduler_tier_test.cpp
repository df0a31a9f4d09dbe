// Admission with cache tiers below the device: a prefix found there puts the request
// in LOADING_CACHE with a TierLoad for exactly the blocks past the device hit; it runs
// from the restored position once loaded, and recomputes (without asking the tiers
// again) when the restore fails.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "sched/scheduler.h"

namespace keel {
namespace {

constexpr std::int32_t kBs = 4;

std::vector<TokenId> seq(std::int32_t n, TokenId first = 1) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

struct FakeTiers : TierIndex {
  std::set<BlockHash> held;
  bool contains(const BlockHash &h) const override { return held.count(h) != 0; }
};

struct Fixture {
  KvCacheConfig kc;
  KvCacheManager kv;
  Scheduler sched;
  FakeTiers tiers;
  Fixture()
      : kc([] {
          KvCacheConfig c;
          c.num_blocks = 32;
          c.block_size = kBs;
          c.model = ModelFingerprint::of("tier-test");
          return c;
        }()),
        kv(kc),
        sched(SchedulerConfig{64, 4, 64}, kv) {
    sched.set_tiers(&tiers);
  }
  // The chained hashes of the first n blocks of `tokens`.
  std::vector<BlockHash> hashes(const std::vector<TokenId> &tokens, int n) {
    std::vector<BlockHash> h;
    for (int i = 0; i < n; ++i)
      h.push_back(hash_block(kc.model, i ? &h.back() : nullptr,
                             std::span<const TokenId>(tokens).subspan(i * kBs, kBs)));
    return h;
  }
  StepPlan step() {
    StepPlan plan = sched.schedule();
    sched.on_step_done(plan);
    for (const auto &s : plan.seqs)
      if (s.samples) sched.append_token(s.id, 7);
    sched.check_invariants();
    return plan;
  }
};

TEST(SchedulerTiers, DeviceHitThenTierHitLoadsTheRest) {
  Fixture f;
  // Request 1 computes 8 tokens: blocks 0-1 cached on the device.
  f.sched.add_request(RequestId{1}, seq(9));
  f.step();
  f.sched.finish(RequestId{1}, RequestState::kFinishedStop);
  // Blocks 2-3 of a longer prompt are in a lower tier; block 4 is not.
  const auto prompt = seq(22);
  const auto h = f.hashes(prompt, 5);
  f.tiers.held = {h[2], h[3]};
  f.sched.add_request(RequestId{2}, prompt);
  auto plan = f.step();
  EXPECT_TRUE(plan.seqs.empty());
  ASSERT_EQ(plan.loads.size(), 1u);
  EXPECT_EQ(plan.loads[0].hashes, (std::vector<BlockHash>{h[2], h[3]}));
  const auto blocks = f.kv.blocks(RequestId{2});
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(plan.loads[0].blocks, (std::vector<BlockId>{blocks[2], blocks[3]}));
  EXPECT_EQ(f.sched.num_loading(), 1);
  EXPECT_TRUE(f.step().seqs.empty());  // skipped while loading
  f.sched.finish_loading(RequestId{2}, true);
  const auto *r = f.sched.find(RequestId{2});
  EXPECT_EQ(r->num_computed_tokens, 16);
  EXPECT_EQ(r->num_cached_prompt_tokens, 16);
  EXPECT_EQ(f.kv.stats().restored_tokens, 8);
  // The restored blocks are cached on the device again.
  EXPECT_EQ(f.kv.pool().find(h[3]), blocks[3]);
  plan = f.step();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start_pos, 16);
}

TEST(SchedulerTiers, WholePromptInTiersLeavesTheLastTokenToCompute) {
  Fixture f;
  const auto prompt = seq(12);  // three full blocks
  const auto h = f.hashes(prompt, 3);
  f.tiers.held = {h[0], h[1], h[2]};
  f.sched.add_request(RequestId{1}, prompt);
  auto plan = f.step();
  ASSERT_EQ(plan.loads.size(), 1u);
  EXPECT_EQ(plan.loads[0].hashes.size(), 3u);
  f.sched.finish_loading(RequestId{1}, true);
  EXPECT_EQ(f.sched.find(RequestId{1})->num_computed_tokens, 11);
  plan = f.step();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start_pos, 11);
  EXPECT_EQ(plan.seqs[0].num_tokens, 1);
  EXPECT_TRUE(plan.seqs[0].samples);
}

TEST(SchedulerTiers, FailedRestoreRecomputesWithoutTheTiers) {
  Fixture f;
  const auto prompt = seq(10);
  const auto h = f.hashes(prompt, 2);
  f.tiers.held = {h[0], h[1]};
  f.sched.add_request(RequestId{1}, prompt);
  ASSERT_EQ(f.step().loads.size(), 1u);
  f.sched.finish_loading(RequestId{1}, false);
  EXPECT_EQ(f.kv.num_free_blocks(), 32);
  auto plan = f.step();
  EXPECT_TRUE(plan.loads.empty());
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start_pos, 0);
  EXPECT_EQ(f.kv.stats().restored_tokens, 0);
}

TEST(SchedulerTiers, NoTierHitAdmitsAsBefore) {
  Fixture f;
  f.sched.add_request(RequestId{1}, seq(10));
  auto plan = f.step();
  EXPECT_TRUE(plan.loads.empty());
  ASSERT_EQ(plan.seqs.size(), 1u);
}

TEST(SchedulerTiers, AbortWhileLoadingFreesBlocks) {
  Fixture f;
  const auto prompt = seq(10);
  const auto h = f.hashes(prompt, 2);
  f.tiers.held = {h[0], h[1]};
  f.sched.add_request(RequestId{1}, prompt);
  f.step();
  EXPECT_TRUE(f.sched.finish(RequestId{1}, RequestState::kFinishedAbort));
  EXPECT_EQ(f.kv.num_free_blocks(), 32);
  f.sched.finish_loading(RequestId{1}, true);  // late completion: ignored
  f.sched.check_invariants();
}

}  // namespace
}  // namespace keel

namespace keel {
namespace {

TEST(SchedulerTiers, PartialRestoreRunsFromWhereItStopped) {
  Fixture f;
  const auto prompt = seq(18);
  const auto h = f.hashes(prompt, 4);
  f.tiers.held = {h[0], h[1], h[2], h[3]};
  f.sched.add_request(RequestId{1}, prompt);
  ASSERT_EQ(f.step().loads[0].hashes.size(), 4u);
  f.sched.finish_loading(RequestId{1}, true, 2 * kBs);  // only two blocks landed
  const auto *r = f.sched.find(RequestId{1});
  EXPECT_EQ(r->num_computed_tokens, 8);
  EXPECT_EQ(r->num_cached_prompt_tokens, 8);
  EXPECT_EQ(f.kv.stats().restored_tokens, 8);
  EXPECT_EQ(f.kv.pool().find(h[2]), std::nullopt);  // never landed: not cached
  auto plan = f.step();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start_pos, 8);
  EXPECT_EQ(plan.seqs[0].num_tokens, 10);
}

}  // namespace
}  // namespace keel
