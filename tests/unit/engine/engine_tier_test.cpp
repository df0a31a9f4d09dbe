// The engine with cache tiers, over the real CPU runner: a prefix pushed out of the
// device comes back from host RAM, from SSD, and from SSD after a restart, each time
// with output and logprobs bit-identical to a cold run and the hit reported.
#include <gtest/gtest.h>

#include "tier_engine_util.h"

namespace keel::test {
namespace {

TEST(EngineTiers, RestoreFromRamSsdAndAfterRestartMatchesColdRun) {
  if (!std::filesystem::exists(tier_model())) GTEST_SKIP() << "missing " << tier_model();
  const auto prompt = tier_prompt(11, 100);  // 6 full blocks of 16, then 4 tokens
  const Collected cold = cold_reference(prompt);
  ASSERT_EQ(cold.tokens.size(), 8u);
  TempDir dir;
  TierEngineOptions o;
  o.ssd_dir = dir.path();
  {
    auto e = open_tier_engine(o);
    expect_same_output(run_one(*e, 1, prompt), cold);
    // Device -> RAM: the device forgets, host RAM holds the blocks.
    e->demote_cache(false).get();
    auto c = run_one(*e, 2, prompt);
    expect_same_output(c, cold);
    EXPECT_EQ(c.cached_prompt_tokens, 96);
    ASSERT_TRUE(eventually([&] { return e->status().host_tier.hit_blocks == 6; }));
    EXPECT_EQ(e->status().restored_tokens, 96);
    // RAM dropped: only the SSD tier holds them.
    e->demote_cache(true).get();
    EXPECT_GE(e->status().ssd_tier.blocks, 6);
    c = run_one(*e, 3, prompt);
    expect_same_output(c, cold);
    EXPECT_EQ(c.cached_prompt_tokens, 96);
    ASSERT_TRUE(eventually([&] { return e->status().ssd_tier.hit_blocks == 6; }));
    EXPECT_EQ(e->status().restored_tokens, 192);
    EXPECT_EQ(e->status().ssd_tier.errors, 0);
    EXPECT_EQ(e->status().loading_cache, 0);
  }
  EXPECT_GE(block_files(dir.path()).size(), 6u);
  // A new engine on the same directory: the prompt hits on SSD.
  auto e = open_tier_engine(o);
  EXPECT_GE(e->status().ssd_tier.blocks, 6);
  auto c = run_one(*e, 1, prompt);
  expect_same_output(c, cold);
  EXPECT_EQ(c.cached_prompt_tokens, 96);
  ASSERT_TRUE(eventually([&] { return e->status().ssd_tier.hit_blocks == 6; }));
  EXPECT_EQ(e->status().restored_tokens, 96);
}

TEST(EngineTiers, BlocksEvictedByOtherRequestsAreOffloadedAndRestored) {
  if (!std::filesystem::exists(tier_model())) GTEST_SKIP() << "missing " << tier_model();
  const auto p = tier_prompt(21, 100);
  const Collected cold = cold_reference(p);
  TierEngineOptions o;
  o.blocks = 16;  // 256 tokens: two other prompts push p's blocks out
  auto e = open_tier_engine(o);
  expect_same_output(run_one(*e, 1, p), cold);
  run_one(*e, 2, tier_prompt(22, 120));
  run_one(*e, 3, tier_prompt(23, 120));
  ASSERT_TRUE(eventually([&] { return e->status().host_tier.stored_blocks >= 6; }));
  auto c = run_one(*e, 4, p);
  expect_same_output(c, cold);
  EXPECT_EQ(c.cached_prompt_tokens, 96);
  const auto s = e->status();
  EXPECT_GE(s.host_tier.hit_blocks, 1);
  EXPECT_GT(s.restored_tokens, 0);
  EXPECT_TRUE(eventually([&] { return e->status().kv_blocks_used == 0; }));
}

TEST(EngineTiers, ClearCacheEmptiesEveryTier) {
  if (!std::filesystem::exists(tier_model())) GTEST_SKIP() << "missing " << tier_model();
  const auto p = tier_prompt(31, 70);
  TempDir dir;
  TierEngineOptions o;
  o.ssd_dir = dir.path();
  auto e = open_tier_engine(o);
  run_one(*e, 1, p);
  e->demote_cache(false).get();
  ASSERT_GE(block_files(dir.path()).size(), 4u);
  e->clear_cache();
  ASSERT_TRUE(eventually([&] {
    const auto s = e->status();
    return s.ssd_tier.blocks == 0 && s.host_tier.blocks == 0 && s.kv_blocks_cached == 0 &&
           block_files(dir.path()).empty();
  }));
  auto c = run_one(*e, 2, p);
  EXPECT_EQ(c.cached_prompt_tokens, 0);
}

TEST(EngineTiers, AnotherModelNeverHitsTheseBlocks) {
  if (!std::filesystem::exists(tier_model("qwen2_f32"))) GTEST_SKIP() << "missing qwen2_f32";
  const auto p = tier_prompt(41, 70);
  TempDir dir;
  TierEngineOptions o;
  o.ssd_dir = dir.path();
  {
    auto e = open_tier_engine(o);
    run_one(*e, 1, p);
  }
  const auto files = block_files(dir.path()).size();
  ASSERT_GE(files, 4u);
  o.model = "qwen2_f32";
  const Collected cold = cold_reference(p, 8, "qwen2_f32");
  auto e = open_tier_engine(o);
  auto c = run_one(*e, 1, p);
  expect_same_output(c, cold);
  EXPECT_EQ(c.cached_prompt_tokens, 0);
  EXPECT_EQ(e->status().restored_tokens, 0);
  EXPECT_EQ(e->status().ssd_tier.errors, 0);
}

// Start-up progress (issue 22): an engine on an SSD tier that a previous run filled
// reports the index rebuild, ending with the blocks it found.
TEST(EngineTiers, ReportsRebuildingTheCacheIndexWithTheBlocksFound) {
  if (!std::filesystem::exists(tier_model())) GTEST_SKIP() << "missing " << tier_model();
  TempDir dir;
  TierEngineOptions o;
  o.ssd_dir = dir.path();
  {
    auto e = open_tier_engine(o);
    run_one(*e, 1, tier_prompt(5, 100));
    e->demote_cache(true).get();  // into the SSD tier
  }
  const std::size_t files = block_files(dir.path()).size();
  ASSERT_GE(files, 6u);
  std::vector<LoadProgress> seen;
  o.on_load_progress = [&](const LoadProgress &p) { seen.push_back(p); };
  auto e = open_tier_engine(o);  // reports on the engine thread before returning
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (LoadProgress{"rebuilding cache index", 0, 0, "blocks"}));
  EXPECT_EQ(seen[1].phase, "rebuilding cache index");
  EXPECT_EQ(seen[1].done, static_cast<std::int64_t>(files));
  EXPECT_EQ(seen[1].total, seen[1].done);
  EXPECT_EQ(e->status().ssd_tier.blocks, seen[1].done);
}

}  // namespace
}  // namespace keel::test
