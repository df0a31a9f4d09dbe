// SpeculationGovernor (issue 30's adaptive policy): per batch size, it measures decoding
// with drafts and without, keeps the faster a token, and probes the other now and then.
#include "engine/speculation_governor.h"

#include <gtest/gtest.h>

namespace keel {
namespace {

using Options = SpeculationGovernor::Options;

Options small() {
  Options o;
  o.warmup_steps = 4;
  o.probe_every = 20;
  o.probe_steps = 4;
  o.margin = 0.03;
  return o;
}

// Runs `steps` steps at `running` sequences in whatever mode the governor gives: a step
// with drafts takes `on_s` seconds and emits `on_tokens`, one without `off_s` and 1 token.
// Returns how many of them drafted.
int drive(SpeculationGovernor &g, int running, int steps, double on_s, int on_tokens, double off_s,
          double proposal_s = 0.0) {
  int drafted = 0;
  for (int i = 0; i < steps; ++i) {
    const bool d = g.should_draft(running);
    drafted += d;
    if (d) g.record_proposal(running, proposal_s);  // the engine proposes, then the step runs
    g.record_step(running, d, d, d ? on_s : off_s, d ? on_tokens : 1);
  }
  return drafted;
}

TEST(SpeculationGovernor, MeasuresBothModesFirstThenKeepsTheFasterOne) {
  SpeculationGovernor g(small());
  EXPECT_TRUE(g.should_draft(1));  // drafting is measured first
  EXPECT_FALSE(g.speedup(1).has_value());
  // Drafts: 2.5 ms for 2 tokens (1.25 ms a token) against 1 ms a token without.
  EXPECT_EQ(drive(g, 1, 4, 2.5e-3, 2, 1e-3), 4);
  EXPECT_FALSE(g.should_draft(1));  // then the other mode
  EXPECT_EQ(drive(g, 1, 4, 2.5e-3, 2, 1e-3), 0);
  ASSERT_TRUE(g.speedup(1).has_value());
  EXPECT_NEAR(*g.speedup(1), 0.8, 1e-9);
  EXPECT_FALSE(g.should_draft(1));  // drafting is slower: paused
  // Faster drafts keep it: 3 tokens in 2 ms against 1 ms a token.
  SpeculationGovernor fast(small());
  drive(fast, 1, 8, 2e-3, 3, 1e-3);
  EXPECT_TRUE(fast.should_draft(1));
  EXPECT_NEAR(*fast.speedup(1), 1.5, 1e-9);
}

TEST(SpeculationGovernor, ProposalTimeCountsAgainstDrafting) {
  // Verify steps alone would be 1.6x faster a token, but proposing costs 2.5 ms a step.
  SpeculationGovernor g(small());
  drive(g, 1, 8, 2.5e-3, 4, 1e-3, 2.5e-3);
  EXPECT_FALSE(g.should_draft(1));
  EXPECT_NEAR(*g.speedup(1), 0.8, 0.01);  // (2.5 + 2.5 ms) / 4 tokens against 1 ms
}

TEST(SpeculationGovernor, WithinTheMarginDraftingStays) {
  SpeculationGovernor g(small());
  drive(g, 1, 8, 2.04e-3, 2, 1e-3);  // 2% slower a token
  EXPECT_TRUE(g.should_draft(1));
}

TEST(SpeculationGovernor, ProbesTheOtherModeAndComesBackWhenTheWorkloadChanges) {
  SpeculationGovernor g(small());
  drive(g, 1, 8, 3e-3, 1, 1e-3);  // drafts rejected: 3x slower
  ASSERT_FALSE(g.should_draft(1));
  // 20 steps without, then a 4-step probe with drafts: now they are accepted.
  EXPECT_EQ(drive(g, 1, 20, 3e-3, 4, 1e-3), 0);
  EXPECT_EQ(drive(g, 1, 4, 3e-3, 4, 1e-3), 4);
  EXPECT_TRUE(g.should_draft(1));  // the probe measured 0.75 ms a token: drafting is back
  // And the other way: drafting stays while it pays; a probe without it (its old figures
  // dropped) measures again and drafting stays.
  EXPECT_EQ(drive(g, 1, 20, 3e-3, 4, 1e-3), 20);
  EXPECT_EQ(drive(g, 1, 4, 3e-3, 4, 1e-3), 0);
  EXPECT_TRUE(g.should_draft(1));
}

TEST(SpeculationGovernor, ProbesThatConfirmTheChoiceComeLessOften) {
  Options o = small();  // first probe after 20 steps
  o.max_probe_every = 80;
  SpeculationGovernor g(o);
  drive(g, 1, 8, 3e-3, 1, 1e-3);            // drafting 3x slower: paused
  for (const int gap : {20, 40, 80, 80}) {  // doubling while probes confirm it, capped
    EXPECT_EQ(drive(g, 1, gap, 3e-3, 1, 1e-3), 0) << gap;
    EXPECT_EQ(drive(g, 1, 4, 3e-3, 1, 1e-3), 4) << gap;  // the probe
    EXPECT_FALSE(g.should_draft(1));
  }
  // A probe that changes the choice starts over: drafts now pay, and drafting is probed
  // against again after 20 steps.
  EXPECT_EQ(drive(g, 1, 80, 3e-3, 4, 1e-3), 0);
  EXPECT_EQ(drive(g, 1, 4, 3e-3, 4, 1e-3), 4);
  EXPECT_TRUE(g.should_draft(1));
  EXPECT_EQ(drive(g, 1, 20, 3e-3, 4, 1e-3), 20);
  EXPECT_EQ(drive(g, 1, 4, 3e-3, 4, 1e-3), 0);
  EXPECT_TRUE(g.should_draft(1));
}

TEST(SpeculationGovernor, BatchSizesAreMeasuredApart) {
  SpeculationGovernor g(small());
  drive(g, 1, 8, 1e-3, 3, 1e-3);    // alone: drafting 3x faster
  drive(g, 40, 8, 12e-3, 1, 4e-3);  // 40 running: drafting 3x slower
  EXPECT_TRUE(g.should_draft(1));
  EXPECT_FALSE(g.should_draft(40));
  EXPECT_FALSE(g.should_draft(64));  // the same bucket (33-64)
  EXPECT_TRUE(g.should_draft(2));    // not measured yet: drafting first
  EXPECT_FALSE(g.speedup(2).has_value());
}

TEST(SpeculationGovernor, StepsOfAnotherModeOrEmptyStepsDoNotAdvanceIt) {
  SpeculationGovernor g(small());
  for (int i = 0; i < 10; ++i) g.record_step(1, false, false, 1e-3, 1);  // not the mode it gave
  EXPECT_TRUE(g.should_draft(1));
  for (int i = 0; i < 10; ++i) g.record_step(1, true, true, 1e-3, 0);  // nothing emitted
  EXPECT_TRUE(g.should_draft(1));
  // Drafting on, but the drafter had no guess: plain steps, measured as such, and the
  // warm-up waits for steps that verified drafts.
  for (int i = 0; i < 40; ++i) g.record_step(1, true, false, 1e-3, 1);
  EXPECT_TRUE(g.should_draft(1));
  EXPECT_FALSE(g.speedup(1).has_value());
  drive(g, 1, 4, 1e-3, 2, 1e-3);
  EXPECT_FALSE(g.should_draft(1));  // only now the warm-up without drafts
  drive(g, 1, 4, 1e-3, 2, 1e-3);
  EXPECT_NEAR(*g.speedup(1), 2.0, 1e-9);
}

}  // namespace
}  // namespace keel
