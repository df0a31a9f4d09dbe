// The engine over the real CPU runner and tiny committed models (tests/fixtures/models):
// greedy output is the same alone and beside 31 others (also under preemption), and
// the same with prefix caching on and off, which computes fewer tokens.
#include <gtest/gtest.h>

#include "collector.h"
#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "support/paths.h"

namespace keel::test {
namespace {

std::filesystem::path fixture(const std::string &name) { return fixtures_dir() / "models" / name; }

std::vector<TokenId> model_prompt(std::uint32_t seed, int n, int vocab) {
  std::mt19937 rng(seed);
  std::vector<TokenId> p(n);
  for (auto &t : p) t = static_cast<TokenId>(3 + rng() % (vocab - 3));  // no bos/eos/pad
  return p;
}

std::unique_ptr<Engine> open_engine(const std::string &name, std::int32_t blocks,
                                    bool caching = true) {
  CpuBackendOptions o;
  o.model = fixture(name);
  o.threads = 1;  // the development machine is shared
  o.num_blocks = blocks;
  o.block_size = 16;
  EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 256;
  cfg.scheduler.max_num_seqs = 32;
  cfg.scheduler.max_chunk_tokens = 48;
  cfg.enable_prefix_caching = caching;
  cfg.idle_tick = std::chrono::milliseconds(5);
  return std::make_unique<Engine>(cpu_backend(o), cfg);
}

GenerationRequest req(std::uint64_t id, std::vector<TokenId> prompt, int n) {
  auto r = greedy_request(id, std::move(prompt), n);
  r.sampling.ignore_eos = true;  // random weights: run to max_tokens
  return r;
}

void alone_vs_beside_31(const std::string &model) {
  if (!std::filesystem::exists(fixture(model))) GTEST_SKIP() << "missing " << fixture(model);
  const int kTokens = 12;
  auto shared = model_prompt(77, 64, 320);
  auto prompt_of = [&](int i) {
    std::vector<TokenId> p;
    if (i % 4 == 0) p.assign(shared.begin(), shared.begin() + 20 + i);  // shared prefixes
    auto tail = model_prompt(500 + i, 3 + (i * 13) % 90, 320);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  std::vector<std::vector<TokenId>> alone(32);
  {
    auto e = open_engine(model, 64);
    Collector c;
    for (int i = 0; i < 32; ++i) {
      e->submit(req(i + 1, prompt_of(i), kTokens), c.sink());
      ASSERT_TRUE(c.wait_finished(i + 1, std::chrono::seconds(120)));
      alone[i] = c.get(i + 1).tokens;
      ASSERT_EQ(alone[i].size(), static_cast<std::size_t>(kTokens));
    }
  }
  // 32 requests of up to ~200 tokens: 64 blocks of 16 hold about 1000, so the second
  // run preempts and recomputes.
  for (std::int32_t blocks : {512, 64}) {
    auto e = open_engine(model, blocks);
    Collector c;
    for (int i = 0; i < 32; ++i) e->submit(req(i + 1, prompt_of(i), kTokens), c.sink());
    ASSERT_TRUE(c.wait_finished(32, std::chrono::seconds(300)));
    for (int i = 0; i < 32; ++i)
      EXPECT_EQ(c.get(i + 1).tokens, alone[i])
          << model << " request " << i << ", " << blocks << " blocks";
    ASSERT_TRUE(eventually([&] { return e->status().kv_blocks_used == 0; }));
  }
}

TEST(EngineCpuModel, GreedyAloneEqualsBeside31OthersLlama) { alone_vs_beside_31("llama_gqa_f32"); }
TEST(EngineCpuModel, GreedyAloneEqualsBeside31OthersQwen3) { alone_vs_beside_31("qwen3_f32"); }

TEST(EngineCpuModel, PrefixCachingOnAndOffGiveEqualOutputs) {
  const std::string model = "llama_gqa_f32";
  if (!std::filesystem::exists(fixture(model))) GTEST_SKIP() << "missing " << fixture(model);
  auto system = model_prompt(9, 96, 320);  // 6 full blocks
  auto prompt_of = [&](int i) {
    auto p = system;
    auto q = model_prompt(900 + i, 10 + i, 320);
    p.insert(p.end(), q.begin(), q.end());
    return p;
  };
  std::vector<std::vector<TokenId>> out[2];
  std::vector<std::vector<TokenLogprob>> lps[2];
  EngineStatus st[2];
  for (int on = 0; on < 2; ++on) {
    auto e = open_engine(model, 128, on == 1);
    Collector c;
    for (int i = 0; i < 5; ++i) {
      auto r = req(i + 1, prompt_of(i), 8);
      r.sampling.logprobs = 0;
      e->submit(r, c.sink());
      ASSERT_TRUE(c.wait_finished(i + 1, std::chrono::seconds(60)));
      out[on].push_back(c.get(i + 1).tokens);
      lps[on].push_back(c.get(i + 1).sampled_logprobs);
    }
    // A 112-token prompt (7 full blocks), then its exact repeat: the repeat computes
    // only its last prompt token, into a copy of the last cached block.
    for (std::uint64_t id : {6, 7}) {
      e->submit(req(id, prompt_of(6), 8), c.sink());
      ASSERT_TRUE(c.wait_finished(id, std::chrono::seconds(60)));
      out[on].push_back(c.get(id).tokens);
    }
    ASSERT_TRUE(eventually([&] { return e->status().kv_blocks_used == 0; }));
    st[on] = e->status();
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(out[0][6], out[0][5]);
  for (int i = 0; i < 5; ++i)
    for (std::size_t k = 0; k < lps[0][i].size(); ++k)
      EXPECT_NEAR(lps[0][i][k].logprob, lps[1][i][k].logprob, 1e-5);
  EXPECT_EQ(st[0].prefix_hit_tokens, 0);
  // Requests 2..6 reuse the 96-token system prompt; the repeat reuses 111 of 112.
  EXPECT_EQ(st[1].prefix_hit_tokens, 5 * 96 + 111);
  EXPECT_EQ(st[0].prefill_tokens - st[1].prefill_tokens, 5 * 96 + 111);
}

}  // namespace
}  // namespace keel::test
