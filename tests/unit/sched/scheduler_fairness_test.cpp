// Fair admission by group (issue 31): one API request's sequences share a group; admission
// takes the group with the fewest running first, preempted requests go back with their
// group, and victims come from the group with the most running. A 1,024-sequence request
// cannot hold single requests that arrive after it until it drains.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "sched/scheduler.h"

namespace keel {
namespace {

constexpr std::int32_t kBs = 4;

std::vector<TokenId> seq(std::int32_t n, TokenId first = 1) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

SchedulerConfig cfg(std::int32_t budget, std::int32_t seqs, std::int32_t chunk) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = seqs;
  c.max_chunk_tokens = chunk;
  return c;
}

struct Fixture {
  KvCacheManager kv;
  Scheduler sched;
  Fixture(std::int32_t blocks, SchedulerConfig sc, bool caching = false)
      : kv([&] {
          KvCacheConfig c;
          c.num_blocks = blocks;
          c.block_size = kBs;
          c.enable_prefix_caching = caching;
          c.model = ModelFingerprint::of("fairness-test");
          return c;
        }()),
        sched(sc, kv) {}

  // One step without a model: every sampling sequence gets token 7; with `finish_at` > 0,
  // a request with that many output tokens finishes (length), and its id is returned.
  StepPlan step(std::int32_t finish_at = 0, std::vector<std::uint64_t> *finished = nullptr) {
    StepPlan plan = sched.schedule();
    sched.on_step_done(plan);
    for (const auto &s : plan.seqs) {
      if (!s.samples) continue;
      sched.append_token(s.id, 7);
      if (finish_at > 0 && sched.find(s.id)->num_output_tokens() >= finish_at) {
        sched.finish(s.id, RequestState::kFinishedLength);
        if (finished) finished->push_back(s.id.value);
      }
    }
    sched.check_invariants();
    return plan;
  }
  RequestState state(std::uint64_t id) const { return sched.find(RequestId{id})->state; }
};

bool has(const std::vector<RequestId> &ids, std::uint64_t id) {
  return std::any_of(ids.begin(), ids.end(), [&](RequestId r) { return r.value == id; });
}

TEST(SchedulerFairness, ABigGroupDoesNotHoldSingleRequestsThatArriveLater) {
  // 64 seats, 1,024 sequences of one request (group 1), then four single requests.
  Fixture f(4096, cfg(256, 64, 64));
  constexpr std::uint64_t kBig = 1024;
  for (std::uint64_t i = 1; i <= kBig; ++i)
    f.sched.add_request(RequestId{i}, seq(3, static_cast<TokenId>(i)), true, {}, /*group=*/1);
  f.step();
  f.step();
  ASSERT_EQ(f.sched.num_running(), 64);
  EXPECT_EQ(f.sched.group_running(1), 64);
  for (std::uint64_t i = 2001; i <= 2004; ++i) f.sched.add_request(RequestId{i}, seq(3, 900));
  // Every seat is taken by the big group: the next admission round swaps four of its
  // sequences (its newest) for the single requests.
  StepPlan p = f.step();
  for (std::uint64_t i = 2001; i <= 2004; ++i) {
    EXPECT_EQ(f.state(i), RequestState::kRunning) << i;
    EXPECT_EQ(f.sched.group_running(i), 1);
  }
  EXPECT_EQ(p.preempted.size(), 4u);
  for (RequestId v : p.preempted) EXPECT_LE(v.value, kBig);
  EXPECT_EQ(f.sched.group_running(1), 60);
  // They decode in every step from then on, and the swap is not undone: no more
  // preemptions, and the big group keeps most of its sequences still to run.
  std::vector<std::uint64_t> finished;
  for (int i = 0; i < 8; ++i) f.step(/*finish_at=*/64, &finished);
  for (std::uint64_t i = 2001; i <= 2004; ++i)
    EXPECT_EQ(f.sched.find(RequestId{i})->num_output_tokens(), 9) << i;  // 1 + 8 steps
  EXPECT_TRUE(finished.empty());
  EXPECT_EQ(f.sched.total_preemptions(), 4);
  EXPECT_GE(f.sched.num_waiting() + f.sched.num_preempted(), static_cast<std::int32_t>(kBig) - 64);
}

TEST(SchedulerFairness, SeatsAreSharedBetweenTwoBigGroups) {
  // Two groups of 32 arrive one after the other for 8 seats: admission interleaves them
  // (the group with fewer running next) instead of serving the first one's 32 first.
  Fixture f(1024, cfg(64, 8, 64));
  for (std::uint64_t i = 1; i <= 32; ++i) f.sched.add_request(RequestId{i}, seq(3), true, {}, 1);
  for (std::uint64_t i = 101; i <= 132; ++i)
    f.sched.add_request(RequestId{i}, seq(3), true, {}, 101);
  f.step();
  EXPECT_EQ(f.sched.group_running(1), 4);
  EXPECT_EQ(f.sched.group_running(101), 4);
  EXPECT_EQ(f.sched.total_preemptions(), 0);
}

TEST(SchedulerFairness, PreemptedRequestsDoNotJumpAheadOfAGroupWithFewerRunning) {
  // 10 blocks of 4. Group A's four requests (9 tokens after the prefill, 3 blocks needed) all need
  // a third block: its newest is preempted. A single request B arriving then is admitted before
  // that preempted request (A still runs three; B none), though B arrived later.
  Fixture f(10, cfg(64, 8, 64));
  for (std::uint64_t i = 1; i <= 4; ++i)
    f.sched.add_request(RequestId{i}, seq(8, static_cast<TokenId>(10 * i)), true, {}, 1);
  f.step();  // prefill: 8 blocks, 9 tokens each
  StepPlan p = f.step();
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0].value, 4u);
  f.sched.add_request(RequestId{10}, seq(3, 90));
  p = f.step();
  EXPECT_EQ(f.state(10), RequestState::kRunning);
  EXPECT_EQ(f.state(4), RequestState::kPreempted);
  EXPECT_EQ(f.sched.total_preemptions(), 1);  // B took the free block, no swap
}

TEST(SchedulerFairness, VictimsComeFromTheGroupWithTheMostRunning) {
  // 8 blocks of 4, all taken: group A's three requests and B's one (the newest), 9 tokens
  // each. When they all need a third block, the victims are A's newest, not B.
  Fixture f(8, cfg(64, 8, 64));
  for (std::uint64_t i = 1; i <= 3; ++i)
    f.sched.add_request(RequestId{i}, seq(8, static_cast<TokenId>(10 * i)), true, {}, 1);
  f.sched.add_request(RequestId{4}, seq(8, 80));
  f.step();
  StepPlan p = f.step();
  ASSERT_FALSE(p.preempted.empty());
  EXPECT_EQ(p.preempted[0].value, 3u);
  EXPECT_FALSE(has(p.preempted, 4));
  EXPECT_EQ(f.state(4), RequestState::kRunning);
}

TEST(SchedulerFairness, EqualGroupsKeepArrivalOrderAndThePickWaits) {
  // Single requests are groups of one: with none running, admission is by arrival, and
  // the pick that lacks blocks is not overtaken (no group has two more running to swap).
  Fixture f(6, cfg(64, 8, 64));
  f.sched.add_request(RequestId{1}, seq(16));
  f.step();
  f.sched.add_request(RequestId{2}, seq(12));
  f.sched.add_request(RequestId{3}, seq(2));
  f.step();
  EXPECT_EQ(f.state(2), RequestState::kWaiting);
  EXPECT_EQ(f.state(3), RequestState::kWaiting);
  EXPECT_EQ(f.sched.total_preemptions(), 0);
}

TEST(SchedulerFairness, GroupsAreForgottenWhenTheirLastRequestEnds) {
  Fixture f(64, cfg(64, 8, 64));
  for (std::uint64_t i = 1; i <= 3; ++i) f.sched.add_request(RequestId{i}, seq(3), true, {}, 7);
  f.step();
  EXPECT_EQ(f.sched.group_running(7), 3);
  f.sched.finish(RequestId{1}, RequestState::kFinishedStop);
  f.sched.finish(RequestId{2}, RequestState::kFinishedAbort);
  EXPECT_EQ(f.sched.group_running(7), 1);
  f.sched.finish(RequestId{3}, RequestState::kFinishedLength);
  EXPECT_EQ(f.sched.group_running(7), 0);
  f.sched.check_invariants();
  EXPECT_EQ(f.sched.num_requests(), 0);
}

}  // namespace
}  // namespace keel
