// Engines over the CPU runner and a model's files, for the drafter tests that compare
// greedy output with and without drafts (engine_mtp_test, engine_draft_model_test).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "collector.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "exec/cpu/cpu_model_runner.h"

namespace keel::test {

struct CpuEngine {
  std::unique_ptr<Engine> engine;
  CpuEngine(std::filesystem::path model, EngineConfig cfg, std::int32_t blocks = 256) {
    engine = std::make_unique<Engine>(
        [model, blocks] {
          EngineBackend b;
          b.context = std::make_unique<ExecContext>(2);
          b.runner = cpu::CpuModelRunner::open(model, *b.context, {blocks, 16});
          return b;
        },
        cfg);
  }
  Engine *operator->() { return engine.get(); }
};

using PromptFn = std::function<std::vector<TokenId>(int)>;

// `requests` greedy requests of `tokens` tokens submitted at once (ids 1..); their
// outputs by index, once every KV block is free again; `status` the engine's last.
inline std::map<int, std::vector<TokenId>> run_greedy(const std::filesystem::path &model,
                                                      const EngineConfig &cfg, int requests,
                                                      int tokens, const PromptFn &prompt,
                                                      EngineStatus *status = nullptr) {
  CpuEngine e(model, cfg);
  Collector c;
  for (int i = 0; i < requests; ++i) e->submit(greedy_request(i + 1, prompt(i), tokens), c.sink());
  EXPECT_TRUE(c.wait_finished(requests, std::chrono::seconds(120)));
  std::map<int, std::vector<TokenId>> out;
  for (int i = 0; i < requests; ++i) out[i] = c.get(i + 1).tokens;
  EXPECT_TRUE(eventually([&] { return e->status().kv_blocks_used == 0; }));
  if (status) *status = e->status();
  return out;
}

// 40 tokens every prompt shares, then 3 + i of its own.
inline std::vector<TokenId> shared_prefix_prompt(int i) {
  std::vector<TokenId> p = random_prompt(77, 40);
  auto tail = random_prompt(200 + i, 3 + i);
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

// Two rounds of 8 requests of 20 tokens on one engine of `blocks` blocks of 16 (the
// second finds the first's prompts cached); outputs by 100 * round + index.
inline std::map<int, std::vector<TokenId>> run_two_rounds(const std::filesystem::path &model,
                                                          const EngineConfig &cfg,
                                                          std::int32_t blocks,
                                                          const PromptFn &prompt,
                                                          EngineStatus *status = nullptr) {
  CpuEngine e(model, cfg, blocks);
  std::map<int, std::vector<TokenId>> out;
  for (int round = 0; round < 2; ++round) {
    Collector c;
    for (int i = 0; i < 8; ++i)
      e->submit(greedy_request(100 * round + i + 1, prompt(i), 20), c.sink());
    EXPECT_TRUE(c.wait_finished(8, std::chrono::seconds(120)));
    for (int i = 0; i < 8; ++i) out[100 * round + i] = c.get(100 * round + i + 1).tokens;
  }
  EXPECT_TRUE(eventually([&] { return e->status().kv_blocks_used == 0; }));
  if (status) *status = e->status();
  return out;
}

// The engine's speculative counters after drafting with `method`: some drafts, no more
// accepted than drafted, and the per-position counts adding up to the accepted.
inline void expect_spec_counters(const EngineStatus &s, const std::string &method) {
  EXPECT_EQ(s.spec_method, method);
  EXPECT_GT(s.spec_drafted, 0);
  EXPECT_GE(s.spec_accepted, 0);
  EXPECT_LE(s.spec_accepted, s.spec_drafted);
  std::int64_t at = 0;
  for (const auto n : s.spec_accepted_at) at += n;
  EXPECT_EQ(at, s.spec_accepted);
}

// `make` must throw an error whose message holds `flag` and `needle`.
template <typename Make>
void expect_refusal(Make make, const std::string &flag, const std::string &needle) {
  try {
    make();
    ADD_FAILURE() << "no refusal (" << needle << ")";
  } catch (const std::exception &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(flag), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

}  // namespace keel::test
