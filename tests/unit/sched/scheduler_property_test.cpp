// Random sequences of submit, abort, finish, loading and steps under block pressure:
// no block leaks, none is freed twice, every invariant holds after every step, and when
// everything has ended every reference count is zero. Requests are groups of one (then
// admission is first come first served), or members of a few big groups (fair admission
// by group swaps seats and blocks between them: scheduler.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <set>

#include "sched/scheduler.h"

namespace keel {
namespace {

void run_random(std::uint32_t seed, bool caching, bool grouped = false) {
  std::mt19937 rng(seed);
  KvCacheConfig kc;
  kc.num_blocks = 40;
  kc.block_size = 4;
  kc.enable_prefix_caching = caching;
  kc.model = ModelFingerprint::of("prop");
  KvCacheManager kv(kc);
  SchedulerConfig sc;
  sc.max_num_batched_tokens = 24;
  sc.max_num_seqs = 8;
  sc.max_chunk_tokens = 8;
  Scheduler sched(sc, kv);
  std::set<std::uint64_t> live;
  std::uint64_t next = 1;
  std::int64_t preemptions_seen = 0;
  auto pick = [&] { return *std::next(live.begin(), static_cast<long>(rng() % live.size())); };
  for (int op = 0; op < 6000; ++op) {
    const int kind = static_cast<int>(rng() % 12);
    if (kind < 3) {
      std::vector<TokenId> prompt(1 + rng() % 30);
      const TokenId family = static_cast<TokenId>(rng() % 3);  // shared prefixes
      for (std::size_t i = 0; i < prompt.size(); ++i)
        prompt[i] =
            i < 12 ? family * 100 + static_cast<TokenId>(i) : static_cast<TokenId>(rng() % 50);
      const std::uint64_t group = grouped && rng() % 4 != 0 ? 1000 + rng() % 3 : 0;
      sched.add_request(RequestId{next}, std::move(prompt), rng() % 4 != 0, {}, group);
      live.insert(next++);
    } else if (kind == 3 && !live.empty()) {
      const auto id = pick();
      ASSERT_TRUE(sched.finish(RequestId{id}, RequestState::kFinishedAbort));
      live.erase(id);
    } else if (kind == 4 && !live.empty()) {
      const auto id = pick();
      const auto *r = sched.find(RequestId{id});
      if (r->state == RequestState::kRunning && r->num_output_tokens() > 0) {
        ASSERT_TRUE(sched.finish(RequestId{id}, RequestState::kFinishedStop));
        live.erase(id);
      }
    } else if (kind == 5 && !live.empty()) {
      const auto id = pick();
      const auto *r = sched.find(RequestId{id});
      if (r->state == RequestState::kLoadingCache) {
        sched.finish_loading(RequestId{id}, rng() % 2 == 0);
      } else if ((r->state == RequestState::kWaiting || r->state == RequestState::kPreempted) &&
                 r->num_tokens() > 1) {
        sched.start_loading(RequestId{id},
                            1 + static_cast<std::int32_t>(rng() % (r->num_tokens() - 1)));
      }
    } else {
      std::vector<std::uint64_t> queued;  // WAITING or PREEMPTED before this step
      for (auto id : live) {
        const auto st = sched.find(RequestId{id})->state;
        if (st == RequestState::kWaiting || st == RequestState::kPreempted) queued.push_back(id);
      }
      StepPlan plan = sched.schedule();
      // FCFS: whatever was admitted arrived before whatever still waits.
      std::uint64_t newest_admitted = 0, oldest_waiting = UINT64_MAX;
      for (auto id : queued) {
        const auto *r = sched.find(RequestId{id});
        if (r->state == RequestState::kRunning)
          newest_admitted = std::max(newest_admitted, r->arrival + 1);
        else
          oldest_waiting = std::min(oldest_waiting, r->arrival + 1);
      }
      if (!grouped) {
        ASSERT_LT(newest_admitted, oldest_waiting);
      }
      std::int32_t total = 0;
      std::set<std::uint64_t> in_step;
      for (const auto &s : plan.seqs) {
        ASSERT_TRUE(in_step.insert(s.id.value).second);
        ASSERT_GE(s.num_tokens, 1);
        ASSERT_LE(s.num_tokens, sc.max_chunk_tokens);
        total += s.num_tokens;
        // Every position written this step is in a block that only this request holds
        // and that is not cached.
        const auto blocks = kv.blocks(s.id);
        ASSERT_GE(static_cast<std::int32_t>(blocks.size()) * 4, s.start_pos + s.num_tokens);
        for (std::int32_t p = s.start_pos; p < s.start_pos + s.num_tokens; ++p)
          ASSERT_TRUE(kv.writable(blocks[p / 4])) << "seq " << s.id.value << " pos " << p;
      }
      ASSERT_EQ(total, plan.total_tokens);
      ASSERT_LE(total, sc.max_num_batched_tokens);
      preemptions_seen += static_cast<std::int64_t>(plan.preempted.size());
      sched.on_step_done(plan);
      for (const auto &s : plan.seqs) {
        if (!s.samples) continue;
        sched.append_token(s.id, static_cast<TokenId>(rng() % 50));
        const auto *r = sched.find(s.id);
        if (r->num_output_tokens() >= 1 + static_cast<std::int32_t>(s.id.value % 20)) {
          ASSERT_TRUE(sched.finish(s.id, RequestState::kFinishedLength));
          live.erase(s.id.value);
        }
      }
    }
    sched.check_invariants();
  }
  for (auto id : live) ASSERT_TRUE(sched.finish(RequestId{id}, RequestState::kFinishedAbort));
  sched.check_invariants();
  EXPECT_EQ(sched.num_requests(), 0);
  EXPECT_EQ(kv.num_requests(), 0);
  EXPECT_EQ(kv.num_free_blocks(), kc.num_blocks);
  for (std::int32_t b = 0; b < kc.num_blocks; ++b) ASSERT_EQ(kv.pool().ref_count(BlockId{b}), 0);
  EXPECT_GT(preemptions_seen, 0) << "the workload never ran out of blocks";
}

TEST(SchedulerProperty, RandomOpsWithPrefixCaching) {
  for (std::uint32_t seed = 1; seed <= 5; ++seed) run_random(seed, true);
}

TEST(SchedulerProperty, RandomOpsInGroups) {
  for (std::uint32_t seed = 21; seed <= 25; ++seed) run_random(seed, seed % 2 == 0, true);
}

TEST(SchedulerProperty, RandomOpsWithoutPrefixCaching) {
  for (std::uint32_t seed = 11; seed <= 15; ++seed) run_random(seed, false);
}

}  // namespace
}  // namespace keel
