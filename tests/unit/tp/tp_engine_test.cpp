// The whole engine (scheduler once, on rank 0) over a CPU tensor-parallel group of
// real processes: the same greedy tokens as one rank, for requests batched together,
// with prefix caching (copy-on-write blocks reach every rank).
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/cpu_backend.h"
#include "engine/engine.h"
#include "engine/tp/backend.h"
#include "engine/tp/runner.h"
#include "support/paths.h"
#include "tp_test_launch.h"
#include "unit/engine/collector.h"
#include "unit/engine/engine_test_util.h"

namespace keel::test {
namespace {

std::filesystem::path model() { return fixtures_dir() / "models" / "llama_linear_mha_f32"; }

EngineConfig config() {
  EngineConfig cfg = small_config(128, 8, 24);
  return cfg;
}

BackendFactory tp_factory(int size) {
  return [size] {
    EngineBackend b;
    b.context = std::make_unique<ExecContext>(1);
    tp::TpRunnerOptions o;
    o.model = model();
    o.size = size;
    o.threads_per_rank = 1;
    o.kv = {64, 16};
    o.launch = tp_test_launch();
    b.runner = std::make_unique<tp::TpCpuRunner>(o, *b.context);
    return b;
  };
}

// Six requests with shared prefixes batched together, then the same six again (prefix
// cache hits: their blocks are reused, partly copied on write, on every rank).
std::vector<std::vector<TokenId>> run(Engine &e) {
  Collector c;
  std::vector<TokenId> shared = random_prompt(5, 40);
  std::vector<std::vector<TokenId>> out;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 6; ++i) {
      std::vector<TokenId> p(shared.begin(), shared.begin() + 20 + i * 3);
      auto tail = random_prompt(100 + i, 5 + i);
      p.insert(p.end(), tail.begin(), tail.end());
      auto r = greedy_request(round * 6 + i + 1, p, 10);
      r.sampling.ignore_eos = true;
      e.submit(r, c.sink());
    }
    EXPECT_TRUE(c.wait_finished(6 * (round + 1), std::chrono::seconds(60)));
  }
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(c.get(i + 1).finish, FinishReason::kLength) << c.get(i + 1).error;
    out.push_back(c.get(i + 1).tokens);
  }
  return out;
}

TEST(TpEngine, GreedyTokensMatchOneRank) {
  if (!std::filesystem::exists(model())) GTEST_SKIP() << model() << " missing";
  CpuBackendOptions one;
  one.model = model();
  one.threads = 1;
  one.num_blocks = 64;
  one.block_size = 16;
  std::vector<std::vector<TokenId>> ref;
  {
    Engine e(cpu_backend(one), config());
    ref = run(e);
  }
  for (int size : {2, 4}) {
    Engine e(tp_factory(size), config());
    EXPECT_EQ(run(e), ref) << "tp=" << size;
    EXPECT_GT(e.status().prefix_hit_tokens, 0);
  }
}

// The factory body `keel engine --tensor-parallel N` uses.
TEST(TpEngine, CpuTpBackendServesRequests) {
  if (!std::filesystem::exists(model())) GTEST_SKIP() << model() << " missing";
  tp::CpuTpBackendOptions o;
  o.model = model();
  o.tensor_parallel = 2;
  o.threads = 2;
  o.num_blocks = 64;
  o.launch = tp_test_launch();
  Engine e([o] { return tp::make_cpu_tp_backend(o); }, config());
  EXPECT_EQ(e.model_config().num_kv_heads, 4);  // the whole model's config
  Collector c;
  auto r = greedy_request(1, random_prompt(9, 30), 5);
  r.sampling.ignore_eos = true;
  e.submit(r, c.sink());
  ASSERT_TRUE(c.wait_finished(1, std::chrono::seconds(30)));
  EXPECT_EQ(c.get(1).finish, FinishReason::kLength) << c.get(1).error;
  EXPECT_EQ(c.get(1).tokens.size(), 5u);
}

}  // namespace
}  // namespace keel::test
