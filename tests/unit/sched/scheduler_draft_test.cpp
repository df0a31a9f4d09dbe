// Drafts in the scheduler (issue 30): a decode carries its request's drafts only from the
// budget and blocks left after every decode, prefill chunk and admission; only the
// accepted tokens count as computed, and the blocks of rejected ones are freed.
#include <gtest/gtest.h>

#include <numeric>

#include "sched/scheduler.h"

namespace keel {
namespace {

std::vector<TokenId> seq(std::int32_t n, TokenId first = 1) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

struct Fixture {
  KvCacheManager kv;
  Scheduler sched;
  Fixture(std::int32_t blocks, std::int32_t budget)
      : kv([&] {
          KvCacheConfig c;
          c.num_blocks = blocks;
          c.block_size = 4;
          c.model = ModelFingerprint::of("draft-test");
          return c;
        }()),
        sched(
            [&] {
              SchedulerConfig c;
              c.max_num_batched_tokens = budget;
              c.max_num_seqs = 4;
              c.max_chunk_tokens = 64;
              return c;
            }(),
            kv) {}
};

TEST(SchedulerDrafts, DraftsRideTheDecodeAndRollBack) {
  Fixture f(16, 64);
  f.sched.add_request(RequestId{1}, seq(6));
  StepPlan p = f.sched.schedule();  // the prompt
  f.sched.on_step_done(p);
  f.sched.append_token(RequestId{1}, 50);
  f.sched.set_draft(RequestId{1}, {51, 52, 53, 54});
  p = f.sched.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].start_pos, 6);
  EXPECT_EQ(p.seqs[0].num_tokens, 5);
  EXPECT_EQ(p.seqs[0].draft, (std::vector<TokenId>{51, 52, 53, 54}));
  EXPECT_EQ(p.total_tokens, 5);
  EXPECT_EQ(f.kv.blocks(RequestId{1}).size(), 3u);  // positions 0..10
  f.sched.on_step_done(p);
  EXPECT_EQ(f.sched.find(RequestId{1})->num_computed_tokens, 7);  // drafts not yet
  // 51 accepted (its KV computed), then the target chose 60 instead of 52.
  f.sched.append_token(RequestId{1}, 51, true);
  f.sched.append_token(RequestId{1}, 60);
  f.sched.settle_drafts(RequestId{1});
  const SchedRequest *r = f.sched.find(RequestId{1});
  EXPECT_EQ(r->num_computed_tokens, 8);
  EXPECT_EQ(r->num_tokens(), 9);
  EXPECT_EQ(f.kv.blocks(RequestId{1}).size(), 3u);  // position 8 is in block 2
  EXPECT_EQ(f.kv.pool().num_cached(), 2);           // blocks 0 and 1: accepted tokens
  f.sched.check_invariants();
  // The next decode carries a new draft; one not renewed is not reused.
  f.sched.set_draft(RequestId{1}, {61});
  p = f.sched.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].draft, (std::vector<TokenId>{61}));
  f.sched.on_step_done(p);
  f.sched.append_token(RequestId{1}, 70);  // 61 rejected
  f.sched.settle_drafts(RequestId{1});
  p = f.sched.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_TRUE(p.seqs[0].draft.empty());
  f.sched.check_invariants();
}

TEST(SchedulerDrafts, DraftsTakeOnlyWhatIsLeft) {
  Fixture f(6, 8);  // 6 blocks of 4, a budget of 8 tokens
  f.sched.add_request(RequestId{1}, seq(4));
  StepPlan p = f.sched.schedule();
  f.sched.on_step_done(p);
  f.sched.append_token(RequestId{1}, 50);
  // A waiting prompt of 5 takes its chunk first; the draft gets the 2 tokens left.
  f.sched.add_request(RequestId{2}, seq(5, 100));
  f.sched.set_draft(RequestId{1}, {51, 52, 53, 54});
  p = f.sched.schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].draft, (std::vector<TokenId>{51, 52}));
  EXPECT_EQ(p.total_tokens, 8);
  f.sched.on_step_done(p);
  // No free blocks: no drafts, and nobody is preempted for them.
  Fixture g(2, 64);
  g.sched.add_request(RequestId{1}, seq(7));
  p = g.sched.schedule();
  g.sched.on_step_done(p);
  g.sched.append_token(RequestId{1}, 50);  // 8 tokens: both blocks
  g.sched.set_draft(RequestId{1}, {51, 52});
  p = g.sched.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_TRUE(p.seqs[0].draft.empty());
  EXPECT_TRUE(p.preempted.empty());
}

}  // namespace
}  // namespace keel
