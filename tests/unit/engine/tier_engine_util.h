// A real Engine over the CPU runner and a tiny committed model, with cache tiers in a
// temporary directory; shared by the tier tests here and the cache fault tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "collector.h"
#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "support/paths.h"
#include "unit/kv/tier_test_util.h"

namespace keel::test {

inline std::filesystem::path tier_model(const std::string &name = "llama_gqa_f32") {
  return fixtures_dir() / "models" / name;
}

struct TierEngineOptions {
  std::string model = "llama_gqa_f32";
  std::int32_t blocks = 64;
  std::int64_t host_bytes = 16 << 20;
  std::filesystem::path ssd_dir;  // empty: no SSD tier
  std::int64_t ssd_bytes = 64 << 20;
  bool caching = true;
  std::int32_t max_pending_writes = 256;
  LoadProgressSink on_load_progress;
};

inline std::unique_ptr<Engine> open_tier_engine(const TierEngineOptions &o) {
  CpuBackendOptions b;
  b.model = tier_model(o.model);
  b.threads = 1;  // the development machine is shared
  b.num_blocks = o.blocks;
  b.block_size = 16;
  EngineConfig cfg;
  cfg.scheduler.max_num_batched_tokens = 256;
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.max_chunk_tokens = 64;
  cfg.enable_prefix_caching = o.caching;
  cfg.idle_tick = std::chrono::milliseconds(5);
  cfg.model_fingerprint = b.model.string();
  cfg.tiers.host_bytes = o.host_bytes;
  cfg.tiers.ssd_dir = o.ssd_dir;
  cfg.tiers.ssd_bytes = o.ssd_dir.empty() ? 0 : o.ssd_bytes;
  cfg.tiers.max_pending_writes = o.max_pending_writes;
  cfg.on_load_progress = o.on_load_progress;
  return std::make_unique<Engine>(cpu_backend(b), cfg);
}

inline std::vector<TokenId> tier_prompt(std::uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::vector<TokenId> p(n);
  for (auto &t : p) t = static_cast<TokenId>(3 + rng() % 317);  // no bos/eos/pad
  return p;
}

inline GenerationRequest tier_request(std::uint64_t id, std::vector<TokenId> prompt, int n = 8) {
  auto r = greedy_request(id, std::move(prompt), n);
  r.sampling.ignore_eos = true;
  r.sampling.logprobs = 2;
  return r;
}

// Runs one request to the end.
inline Collected run_one(Engine &e, std::uint64_t id, const std::vector<TokenId> &prompt,
                         int n = 8) {
  Collector c;
  e.submit(tier_request(id, prompt, n), c.sink());
  EXPECT_TRUE(c.wait_finished(1, std::chrono::seconds(60)));
  return c.get(id);
}

// Same tokens and bit-identical logprobs (top ones included).
inline void expect_same_output(const Collected &a, const Collected &b) {
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.sampled_logprobs.size(), b.sampled_logprobs.size());
  for (std::size_t i = 0; i < a.sampled_logprobs.size(); ++i) {
    EXPECT_EQ(a.sampled_logprobs[i].token, b.sampled_logprobs[i].token);
    EXPECT_EQ(a.sampled_logprobs[i].logprob, b.sampled_logprobs[i].logprob) << "token " << i;
  }
  ASSERT_EQ(a.top_logprobs.size(), b.top_logprobs.size());
  for (std::size_t i = 0; i < a.top_logprobs.size(); ++i)
    for (std::size_t k = 0; k < a.top_logprobs[i].size() && k < b.top_logprobs[i].size(); ++k)
      EXPECT_EQ(a.top_logprobs[i][k].logprob, b.top_logprobs[i][k].logprob);
  EXPECT_EQ(a.finish, b.finish);
}

// Greedy output of `prompt` computed without any cache.
inline Collected cold_reference(const std::vector<TokenId> &prompt, int n = 8,
                                const std::string &model = "llama_gqa_f32") {
  TierEngineOptions o;
  o.model = model;
  o.caching = false;
  o.host_bytes = 0;
  auto e = open_tier_engine(o);
  return run_one(*e, 1, prompt, n);
}

inline std::vector<std::filesystem::path> block_files(const std::filesystem::path &root) {
  std::vector<std::filesystem::path> v;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(root, ec);
       it != std::filesystem::recursive_directory_iterator(); ++it)
    if (it->path().extension() == ".kvb") v.push_back(it->path());
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace keel::test
