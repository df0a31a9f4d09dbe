#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"

namespace keel {
namespace {

constexpr std::int32_t kBs = 4;

std::vector<TokenId> seq(std::int32_t n, TokenId first = 1) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

struct Fixture {
  KvCacheManager kv;
  Scheduler sched;
  Fixture(std::int32_t blocks, SchedulerConfig sc, bool caching = true)
      : kv([&] {
          KvCacheConfig c;
          c.num_blocks = blocks;
          c.block_size = kBs;
          c.enable_prefix_caching = caching;
          c.model = ModelFingerprint::of("sched-test");
          return c;
        }()),
        sched(sc, kv) {}

  // One step without a model: every sampling sequence gets token 7.
  StepPlan step() {
    StepPlan plan = sched.schedule();
    sched.on_step_done(plan);
    for (const auto &s : plan.seqs)
      if (s.samples) sched.append_token(s.id, 7);
    sched.check_invariants();
    return plan;
  }
};

SchedulerConfig cfg(std::int32_t budget, std::int32_t seqs, std::int32_t chunk) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = seqs;
  c.max_chunk_tokens = chunk;
  return c;
}

const ScheduledSeq *find(const StepPlan &p, std::uint64_t id) {
  for (const auto &s : p.seqs)
    if (s.id.value == id) return &s;
  return nullptr;
}

TEST(Scheduler, RejectsBadConfigAndInput) {
  KvCacheConfig kc;
  kc.num_blocks = 4;
  KvCacheManager kv(kc);
  EXPECT_THROW(Scheduler(cfg(8, 16, 4), kv), Error);  // budget below max seqs
  EXPECT_THROW(Scheduler(cfg(8, 0, 4), kv), Error);
  Scheduler s(cfg(16, 4, 4), kv);
  EXPECT_THROW(s.add_request(RequestId{1}, {}), Error);
  s.add_request(RequestId{1}, {1});
  EXPECT_THROW(s.add_request(RequestId{1}, {1}), Error);
}

TEST(Scheduler, PrefillInChunksThenDecodeOneTokenPerStep) {
  Fixture f(32, cfg(64, 4, 5));
  f.sched.add_request(RequestId{1}, seq(12));
  auto p1 = f.step();
  ASSERT_EQ(p1.seqs.size(), 1u);
  EXPECT_EQ(p1.seqs[0].start_pos, 0);
  EXPECT_EQ(p1.seqs[0].num_tokens, 5);
  EXPECT_FALSE(p1.seqs[0].samples);
  auto p2 = f.step();
  EXPECT_EQ(p2.seqs[0].start_pos, 5);
  EXPECT_EQ(p2.seqs[0].num_tokens, 5);
  auto p3 = f.step();
  EXPECT_EQ(p3.seqs[0].num_tokens, 2);
  EXPECT_TRUE(p3.seqs[0].samples);
  auto p4 = f.step();
  EXPECT_EQ(p4.seqs[0].start_pos, 12);
  EXPECT_EQ(p4.seqs[0].num_tokens, 1);
  EXPECT_TRUE(p4.seqs[0].samples);
  EXPECT_EQ(f.sched.find(RequestId{1})->num_output_tokens(), 2);
}

TEST(Scheduler, LongPrefillNeverDelaysDecodesByMoreThanOneChunk) {
  const std::int32_t chunk = 16;
  Fixture f(512, cfg(32, 8, chunk));
  for (std::uint64_t i = 1; i <= 4; ++i) f.sched.add_request(RequestId{i}, seq(3, 10 * i));
  f.step();  // admits all four, prefill 12 tokens
  f.sched.add_request(RequestId{99}, seq(1000, 5000));
  for (int s = 0; s < 40; ++s) {
    auto p = f.step();
    // Every running decode is in every step, before the prefill, and the step holds at
    // most one chunk of prefill.
    std::int32_t prefill = 0;
    for (std::uint64_t i = 1; i <= 4; ++i) {
      const auto *d = find(p, i);
      ASSERT_NE(d, nullptr) << "decode " << i << " skipped at step " << s;
      EXPECT_EQ(d->num_tokens, 1);
    }
    for (const auto &q : p.seqs)
      if (q.num_tokens > 1) prefill += q.num_tokens;
    EXPECT_LE(prefill, chunk);
    EXPECT_EQ(p.seqs.front().num_tokens, 1);
  }
}

TEST(Scheduler, AdmissionIsFirstComeFirstServed) {
  // 6 blocks of 4 tokens. Request 1 takes 4 blocks; request 2 needs 3 (blocked); request
  // 3 needs 1 and would fit, but must not overtake 2.
  Fixture f(6, cfg(64, 8, 64), false);
  f.sched.add_request(RequestId{1}, seq(16));
  f.step();
  f.sched.add_request(RequestId{2}, seq(12));
  f.sched.add_request(RequestId{3}, seq(2));
  auto p = f.step();
  EXPECT_EQ(find(p, 2), nullptr);
  EXPECT_EQ(find(p, 3), nullptr);
  EXPECT_EQ(f.sched.num_waiting(), 2);
  f.sched.finish(RequestId{1}, RequestState::kFinishedStop);
  p = f.step();
  EXPECT_NE(find(p, 2), nullptr);
  EXPECT_NE(find(p, 3), nullptr);
  EXPECT_EQ(p.seqs[0].id.value, 2u);
}

TEST(Scheduler, MaxNumSeqsCapsRunning) {
  Fixture f(64, cfg(64, 2, 64));
  for (std::uint64_t i = 1; i <= 5; ++i) f.sched.add_request(RequestId{i}, seq(2, 100 * i));
  f.step();
  EXPECT_EQ(f.sched.num_running(), 2);
  EXPECT_EQ(f.sched.num_waiting(), 3);
}

TEST(Scheduler, NewestRunningIsPreemptedAndResumes) {
  // 4 blocks. Two requests of 8 tokens (2 blocks each) fill the pool; when request 1
  // needs a third block, request 2 (the newest) is preempted, and resumes after 1 ends.
  Fixture f(4, cfg(64, 4, 64), false);
  f.sched.add_request(RequestId{1}, seq(8, 1));
  f.sched.add_request(RequestId{2}, seq(8, 50));
  auto p = f.step();  // both prefill, both sample: 9 tokens each, 2 blocks each
  EXPECT_EQ(p.seqs.size(), 2u);
  p = f.step();  // both need a 3rd block: 1 preempts 2
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0].value, 2u);
  EXPECT_NE(find(p, 1), nullptr);
  EXPECT_EQ(find(p, 2), nullptr);
  const SchedRequest *r2 = f.sched.find(RequestId{2});
  EXPECT_EQ(r2->state, RequestState::kPreempted);
  EXPECT_EQ(r2->num_computed_tokens, 0);
  EXPECT_EQ(r2->num_tokens(), 9);  // its output token is kept
  EXPECT_EQ(f.sched.num_preempted(), 1);
  EXPECT_FALSE(f.kv.holds_blocks(RequestId{2}));
  f.sched.finish(RequestId{1}, RequestState::kFinishedLength);
  p = f.step();  // resumes: recomputes all 9 tokens and samples the 10th
  const auto *s2 = find(p, 2);
  ASSERT_NE(s2, nullptr);
  EXPECT_EQ(s2->start_pos, 0);
  EXPECT_EQ(s2->num_tokens, 9);
  EXPECT_TRUE(s2->samples);
  EXPECT_EQ(f.sched.find(RequestId{2})->state, RequestState::kRunning);
  EXPECT_EQ(f.sched.total_preemptions(), 1);
}

TEST(Scheduler, PreemptedRequestResumesFromThePrefixCache) {
  // One spare block: request 1 takes it for its third block, request 2 cannot grow and
  // preempts itself; its two cached blocks stay free and findable.
  Fixture f(5, cfg(64, 4, 64), true);
  f.sched.add_request(RequestId{1}, seq(8, 1));
  f.sched.add_request(RequestId{2}, seq(8, 50));
  f.step();
  auto p = f.step();
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0].value, 2u);
  f.sched.finish(RequestId{1}, RequestState::kFinishedLength);
  p = f.step();
  const auto *s2 = find(p, 2);
  ASSERT_NE(s2, nullptr);
  // Its first 8 tokens filled two blocks that were cached; it hits them and computes
  // only its 9th token.
  EXPECT_EQ(s2->start_pos, 8);
  EXPECT_EQ(s2->num_tokens, 1);
  EXPECT_FALSE(s2->copy.has_value());
  EXPECT_EQ(f.sched.find(RequestId{2})->num_cached_prompt_tokens, 0);  // first admission
}

TEST(Scheduler, NoAdmissionInAStepThatPreempted) {
  Fixture f(4, cfg(64, 4, 64), false);
  f.sched.add_request(RequestId{1}, seq(8, 1));
  f.sched.add_request(RequestId{2}, seq(8, 50));
  f.step();
  f.sched.add_request(RequestId{3}, seq(1, 90));
  auto p = f.step();
  EXPECT_FALSE(p.preempted.empty());
  EXPECT_EQ(find(p, 3), nullptr);
}

TEST(Scheduler, PrefixHitSkipsCachedTokens) {
  Fixture f(32, cfg(64, 4, 64));
  f.sched.add_request(RequestId{1}, seq(10));
  f.step();
  auto t = seq(10);
  t.push_back(42);
  f.sched.add_request(RequestId{2}, t);
  auto p = f.step();
  const auto *s = find(p, 2);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->start_pos, 8);
  EXPECT_EQ(s->num_tokens, 3);
  EXPECT_EQ(f.sched.find(RequestId{2})->num_cached_prompt_tokens, 8);
  // Opting out (prompt logprobs) computes everything.
  f.sched.add_request(RequestId{3}, t, /*use_prefix_cache=*/false);
  p = f.step();
  EXPECT_EQ(find(p, 3)->start_pos, 0);
  // An exact full hit computes only the last token, into a copy of the last block.
  f.sched.add_request(RequestId{4}, seq(8));
  p = f.step();
  const auto *s4 = find(p, 4);
  ASSERT_NE(s4, nullptr);
  EXPECT_EQ(s4->start_pos, 7);
  EXPECT_EQ(s4->num_tokens, 1);
  ASSERT_TRUE(s4->copy.has_value());
  EXPECT_EQ(s4->copy->dst, f.kv.blocks(RequestId{4})[1]);
  EXPECT_EQ(s4->copy->src, f.kv.blocks(RequestId{1})[1]);
}

TEST(Scheduler, LoadingRequestsAreSkippedNotWaitedFor) {
  Fixture f(32, cfg(64, 4, 64));
  f.sched.add_request(RequestId{1}, seq(9));
  f.sched.add_request(RequestId{2}, seq(3, 50));
  ASSERT_TRUE(f.sched.start_loading(RequestId{1}, 8));
  EXPECT_EQ(f.sched.find(RequestId{1})->state, RequestState::kLoadingCache);
  EXPECT_EQ(f.sched.num_loading(), 1);
  for (int i = 0; i < 3; ++i) {
    auto p = f.step();
    EXPECT_EQ(find(p, 1), nullptr);
    EXPECT_NE(find(p, 2), nullptr);  // the step goes on without it
  }
  f.sched.finish_loading(RequestId{1}, true);
  auto p = f.step();
  const auto *s = find(p, 1);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->start_pos, 8);
  EXPECT_EQ(s->num_tokens, 1);
}

TEST(Scheduler, FailedLoadRecomputes) {
  Fixture f(32, cfg(64, 4, 64), false);
  f.sched.add_request(RequestId{1}, seq(9));
  ASSERT_TRUE(f.sched.start_loading(RequestId{1}, 8));
  EXPECT_EQ(f.kv.num_free_blocks(), 30);
  f.sched.finish_loading(RequestId{1}, false);
  EXPECT_EQ(f.kv.num_free_blocks(), 32);
  EXPECT_EQ(f.sched.find(RequestId{1})->state, RequestState::kWaiting);
  auto p = f.step();
  EXPECT_EQ(find(p, 1)->start_pos, 0);
}

TEST(Scheduler, AbortAtEveryStageFreesEverything) {
  Fixture f(16, cfg(64, 2, 4), false);
  f.sched.add_request(RequestId{1}, seq(10));     // will be mid-prefill
  f.sched.add_request(RequestId{2}, seq(2, 40));  // will be decoding
  f.sched.add_request(RequestId{3}, seq(5, 60));  // will be loading
  f.step();
  ASSERT_TRUE(f.sched.start_loading(RequestId{3}, 4));
  f.step();
  f.sched.add_request(RequestId{4}, seq(50, 70));  // waiting: too big for the budget left
  ASSERT_EQ(f.sched.find(RequestId{1})->state, RequestState::kRunning);
  ASSERT_LT(f.sched.find(RequestId{1})->num_computed_tokens, 10);
  ASSERT_GT(f.sched.find(RequestId{2})->num_output_tokens(), 0);
  for (std::uint64_t id : {1, 2, 3, 4}) {
    EXPECT_TRUE(f.sched.finish(RequestId{id}, RequestState::kFinishedAbort));
    EXPECT_FALSE(f.kv.holds_blocks(RequestId{id}));
    f.sched.check_invariants();
  }
  EXPECT_FALSE(f.sched.finish(RequestId{1}, RequestState::kFinishedAbort));
  EXPECT_EQ(f.sched.num_requests(), 0);
  EXPECT_EQ(f.kv.num_free_blocks(), 16);
  EXPECT_TRUE(f.sched.schedule().empty());
  f.sched.finish_loading(RequestId{3}, true);  // a late completion is ignored
}

TEST(Scheduler, FinishWithAnIllegalStateThrowsAndKeepsTheRequest) {
  Fixture f(16, cfg(64, 4, 64));
  f.sched.add_request(RequestId{1}, seq(3));
  EXPECT_THROW(f.sched.finish(RequestId{1}, RequestState::kFinishedLength), Error);
  EXPECT_EQ(f.sched.num_waiting(), 1);
  f.sched.check_invariants();
}

}  // namespace
}  // namespace keel

namespace keel {
namespace {

// Backpressure from the cache tiers: with a limit, admission slows (one per step), it
// never stops; without one, all fit in one step.
TEST(Scheduler, AdmissionLimitSlowsButNeverStopsAdmission) {
  Fixture f(64, cfg(64, 8, 16));
  for (std::uint64_t id = 1; id <= 3; ++id) f.sched.add_request(RequestId{id}, seq(5, 10 * id));
  f.sched.set_admission_limit(1);
  for (std::uint64_t id = 1; id <= 3; ++id) {
    const StepPlan p = f.step();
    EXPECT_NE(find(p, id), nullptr) << "request " << id << " admitted in its own step";
    EXPECT_EQ(find(p, id + 1), nullptr);
  }
  Fixture g(64, cfg(64, 8, 16));
  for (std::uint64_t id = 1; id <= 3; ++id) g.sched.add_request(RequestId{id}, seq(5, 10 * id));
  g.sched.set_admission_limit(-1);
  const StepPlan p = g.step();
  EXPECT_EQ(p.seqs.size(), 3u);
}

}  // namespace
}  // namespace keel
