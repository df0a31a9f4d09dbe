// CPU tensor parallelism with real worker processes: TP=2 and TP=4 give the greedy
// tokens and logprobs of TP=1, KV block images are in the single-rank layout, a model
// that does not split is a clear error.
#include "engine/tp/runner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "exec/cpu/cpu_model_runner.h"
#include "support/paths.h"
#include "tp_test_launch.h"

namespace keel {
namespace {

constexpr std::int32_t kBlock = 4;

std::filesystem::path fixture(const std::string &name) {
  return test::fixtures_dir() / "models" / name;
}

struct Trace {
  std::vector<std::vector<TokenId>> tokens;  // [seq][generated]
  std::vector<std::vector<float>> logprobs;  // [step * seqs + seq][vocab]
};

std::vector<float> log_softmax(const float *x, int n) {
  const float m = *std::max_element(x, x + n);
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i] - m));
  std::vector<float> out(x, x + n);
  for (float &v : out) v = static_cast<float>(v - m - std::log(s));
  return out;
}

// Two sequences (a 7-token and a 10-token prompt), prefilled together, then decoded
// greedily together for `steps` steps, over blocks of 4 tokens.
Trace greedy(ModelRunner &runner, int steps) {
  const std::vector<std::vector<TokenId>> prompts = {{1, 17, 33, 5, 90, 12, 8},
                                                     {1, 200, 3, 44, 61, 7, 250, 9, 31, 140}};
  const int V = runner.config().vocab_size;
  std::vector<std::vector<TokenId>> seq = prompts;
  Trace tr;
  tr.tokens.resize(prompts.size());
  std::vector<std::int32_t> computed(prompts.size(), 0);
  for (int step = 0; step <= steps; ++step) {
    ForwardBatch b;
    for (std::size_t s = 0; s < seq.size(); ++s) {
      SequenceSlice sl;
      sl.token_offset = b.total_tokens();
      sl.start_pos = computed[s];
      sl.num_tokens = static_cast<std::int32_t>(seq[s].size()) - computed[s];
      sl.block_offset = static_cast<std::int32_t>(b.block_table.size());
      sl.num_blocks = (sl.start_pos + sl.num_tokens + kBlock - 1) / kBlock;
      for (std::int32_t i = 0; i < sl.num_blocks; ++i)
        b.block_table.push_back(static_cast<std::int32_t>(s) * 16 + i);
      b.tokens.insert(b.tokens.end(), seq[s].begin() + computed[s], seq[s].end());
      b.seqs.push_back(sl);
    }
    ForwardOutput out;
    runner.forward(b, out);
    EXPECT_EQ(out.row_seq.size(), seq.size());
    for (std::size_t r = 0; r < out.row_seq.size(); ++r) {
      const float *row = out.logits.data() + r * V;
      const std::size_t s = static_cast<std::size_t>(out.row_seq[r]);
      computed[s] = static_cast<std::int32_t>(seq[s].size());
      const TokenId next = static_cast<TokenId>(std::max_element(row, row + V) - row);
      tr.logprobs.push_back(log_softmax(row, V));
      if (step < steps) {
        seq[s].push_back(next);
        tr.tokens[s].push_back(next);
      }
    }
  }
  return tr;
}

Trace single_rank(const std::filesystem::path &model, int steps) {
  ExecContext ctx(1);
  auto runner = cpu::CpuModelRunner::open(model, ctx, {32, kBlock});
  return greedy(*runner, steps);
}

tp::TpRunnerOptions tp_options(const std::filesystem::path &model, int size) {
  tp::TpRunnerOptions o;
  o.model = model;
  o.size = size;
  o.threads_per_rank = 1;
  o.kv = {32, kBlock};
  o.launch = test::tp_test_launch();
  o.op_timeout = std::chrono::milliseconds(20000);
  return o;
}

void expect_same(const Trace &a, const Trace &b, const std::string &what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << what;
  float worst = 0;
  for (std::size_t i = 0; i < a.logprobs.size(); ++i)
    for (std::size_t v = 0; v < a.logprobs[i].size(); ++v)
      worst = std::max(worst, std::abs(a.logprobs[i][v] - b.logprobs[i][v]));
  EXPECT_LT(worst, 1e-4f) << what << ": largest logprob difference";
}

TEST(TpCpuRunner, MatchesOneRankOnEveryModelShape) {
  struct Case {
    const char *model;
    std::vector<int> sizes;
  } cases[] = {
      {"llama_linear_mha_f32", {2, 4}},  // 4 KV heads: 4 ranks of one head each
      {"qwen2_f32", {2}},                // q/k/v biases sliced with their rows
      {"qwen3_bf16", {2}},               // per-head q/k norms, bf16 weights
  };
  for (const Case &c : cases) {
    const auto model = fixture(c.model);
    if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " missing";
    const Trace ref = single_rank(model, 6);
    for (int size : c.sizes) {
      ExecContext ctx(1);
      tp::TpCpuRunner runner(tp_options(model, size), ctx);
      EXPECT_EQ(runner.group().worker_pids().size(), static_cast<std::size_t>(size - 1));
      expect_same(ref, greedy(runner, 6), std::string(c.model) + " tp=" + std::to_string(size));
    }
  }
}

TEST(TpCpuRunner, KvBlocksUseTheOneRankLayout) {
  const auto model = fixture("llama_linear_mha_f32");
  ExecContext ctx1(1), ctx4(1);
  auto one = cpu::CpuModelRunner::open(model, ctx1, {32, kBlock});
  tp::TpCpuRunner four(tp_options(model, 4), ctx4);
  greedy(*one, 2);
  greedy(four, 2);
  ASSERT_EQ(one->kv().block_bytes(), four.kv().block_bytes());
  std::vector<std::byte> a(one->kv().block_bytes()), b(a.size()), c(a.size());
  one->kv().save_block(1, a);
  four.kv().save_block(1, b);
  const float *fa = reinterpret_cast<const float *>(a.data());
  const float *fb = reinterpret_cast<const float *>(b.data());
  float worst = 0, norm = 0;
  for (std::size_t i = 0; i < a.size() / 4; ++i) {
    worst = std::max(worst, std::abs(fa[i] - fb[i]));
    norm = std::max(norm, std::abs(fa[i]));
  }
  EXPECT_GT(norm, 0.0f);
  EXPECT_LT(worst, 1e-4f);
  // Load the one-rank image into another block of the group, copy it, read it back.
  four.kv().load_block(20, a);
  four.kv().copy_block(20, 21);
  four.kv().save_block(21, c);
  EXPECT_EQ(a, c);
  EXPECT_THROW(four.kv().save_block(99, c), Error);
}

TEST(TpCpuRunner, ModelThatDoesNotSplitIsAClearError) {
  try {
    ExecContext ctx(1);
    tp::TpCpuRunner runner(tp_options(fixture("qwen2_f32"), 4), ctx);  // 2 KV heads
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads"), std::string::npos) << e.what();
  }
}

TEST(TpCpuRunner, BadBatchFailsTheStepNotTheGroup) {
  ExecContext ctx(1);
  tp::TpCpuRunner runner(tp_options(fixture("qwen2_f32"), 2), ctx);
  ForwardBatch bad;
  bad.tokens = {100000};
  bad.seqs = {{0, 1, 0, 0, 1}};
  bad.block_table = {0};
  ForwardOutput out;
  EXPECT_THROW(runner.forward(bad, out), Error);
  EXPECT_FALSE(runner.group().lost());
  greedy(runner, 1);  // the group still works
  EXPECT_FALSE(runner.group().lost());
}

TEST(TpCpuRunner, MissingModelFailsBeforeAnyWorkerStarts) {
  ExecContext ctx(1);
  EXPECT_THROW(tp::TpCpuRunner(tp_options("/nonexistent/model", 2), ctx), Error);
}

}  // namespace
}  // namespace keel
