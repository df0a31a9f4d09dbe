// Sampling on the device against the CPU Sampler (exec/sampler.h) on the same logits,
// parameters and random draws: every sampled token equal, logprobs within 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/sampler.h"
#include "tiny_llama.h"

namespace keel::cuda {
namespace {

// A spread of parameter sets: greedy, plain temperature, each filter, all at once.
SamplingParams params_for(int i) {
  SamplingParams p;
  switch (i % 8) {
    case 0:
      p.temperature = 0;
      break;
    case 1:
      p.temperature = 0.7f;
      break;
    case 2:
      p.temperature = 1.0f;
      p.top_k = 40;
      break;
    case 3:
      p.temperature = 0.9f;
      p.top_p = 0.9f;
      break;
    case 4:
      p.temperature = 1.3f;
      p.min_p = 0.05f;
      break;
    case 5:
      p.temperature = 0.8f;
      p.top_k = 200;
      p.top_p = 0.95f;
      p.min_p = 0.02f;
      break;
    case 6:
      p.temperature = 0;
      p.repetition_penalty = 1.3f;
      break;
    default:
      p.temperature = 1.1f;
      p.top_p = 0.97f;
      p.repetition_penalty = 1.2f;
      p.presence_penalty = 0.5f;
      p.frequency_penalty = 0.3f;
      break;
  }
  if (i % 3 == 0) p.presence_penalty += 0.25f;
  return p;
}

struct Row {
  SamplingParams params;
  std::vector<TokenId> prompt, generated;
  std::uint64_t seed = 0;
};

// ties: logits rounded to halves, so many candidates share a value (greedy and the
// sort must both prefer the lowest id); greedy_only: every row greedy (nothing sorted).
void compare_with_cpu(int R, int V, std::uint32_t seed, bool ties = false,
                      bool greedy_only = false) {
  CudaContext ctx;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(std::size_t(R) * V);
  for (auto &x : logits) x = ties ? std::round(nd(rng) * 2.0f) / 2.0f : nd(rng);
  std::vector<Row> rows(R);
  std::vector<SampleRow> dev_rows(R);
  std::vector<PenaltyEntry> entries;
  std::vector<TokenId> cpu_tokens(R);
  std::vector<float> cpu_logprobs(R);
  for (int r = 0; r < R; ++r) {
    Row &row = rows[r];
    row.params = params_for(greedy_only ? (r % 2) * 6 : r);  // sets 0 and 6 are greedy
    row.seed = 1000 + r;
    // Tokens near the top of the row, so penalties change what is sampled.
    for (int i = 0; i < 30; ++i) row.prompt.push_back(static_cast<TokenId>(rng() % V));
    for (int i = 0; i < 12; ++i) row.generated.push_back(static_cast<TokenId>(rng() % 50));
    const std::span<const float> lr(logits.data() + std::size_t(r) * V, V);
    Sampler sampler(row.params, row.seed);
    const SampleResult res = sampler.sample(lr, row.prompt, row.generated);
    cpu_tokens[r] = res.token;
    cpu_logprobs[r] = res.logprob;
    // The same draw the CPU sampler made.
    std::mt19937_64 draw(row.seed);
    SampleRow &d = dev_rows[r];
    d.inv_temperature = row.params.greedy() ? 0.0f : 1.0f / row.params.temperature;
    d.top_k = row.params.top_k;
    d.top_p = row.params.top_p;
    d.min_p = row.params.min_p;
    d.repetition_penalty = row.params.repetition_penalty;
    d.presence_penalty = row.params.presence_penalty;
    d.frequency_penalty = row.params.frequency_penalty;
    d.u = std::uniform_real_distribution<double>(0.0, 1.0)(draw);
    d.penalty_begin = static_cast<std::int32_t>(entries.size());
    std::map<TokenId, int> seen;
    if (d.repetition_penalty != 1.0f)
      for (TokenId t : row.prompt) seen.emplace(t, 0);
    for (TokenId t : row.generated) ++seen[t];
    for (auto [t, c] : seen) entries.push_back({t, c});
    d.penalty_count = static_cast<std::int32_t>(entries.size()) - d.penalty_begin;
  }
  auto d_logits = test::upload(ctx, logits);
  auto d_rows = test::upload(ctx, dev_rows);
  auto d_entries = test::upload(ctx, entries);
  DeviceBuffer scratch(sample_scratch_bytes(R, V)), tokens(R * 4), lps(R * 4);
  test::poison(ctx, tokens);
  launch_sample(ctx.compute(), d_logits.as<float>(), R, V, d_rows.as<SampleRow>(),
                d_entries.as<PenaltyEntry>(), scratch.data(), scratch.bytes(),
                tokens.as<std::int32_t>(), lps.as<float>());
  const auto got = test::download<std::int32_t>(ctx, tokens, R);
  const auto got_lp = test::download<float>(ctx, lps, R);
  const auto after = test::download<float>(ctx, d_logits, logits.size());
  EXPECT_EQ(after, logits) << "logits must be left unchanged";
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(got[r], cpu_tokens[r]) << "row " << r << " params set " << r % 8;
    EXPECT_NEAR(got_lp[r], cpu_logprobs[r], 1e-4) << "row " << r;
  }
}

TEST(CudaSample, MatchesCpuSamplerSmallVocab) {
  KEEL_REQUIRE_CUDA_DEVICE();
  compare_with_cpu(64, 1000, 1);
  compare_with_cpu(3, 7, 2);  // fewer candidates than top_k
}

TEST(CudaSample, MatchesCpuSamplerWithTiedLogitsAndAllGreedyBatches) {
  KEEL_REQUIRE_CUDA_DEVICE();
  compare_with_cpu(32, 5000, 4, /*ties=*/true);
  compare_with_cpu(16, 5000, 5, /*ties=*/true, /*greedy_only=*/true);
  compare_with_cpu(16, 128256, 6, /*ties=*/false, /*greedy_only=*/true);
}

TEST(CudaSample, MatchesCpuSamplerLlama3Vocab) {
  KEEL_REQUIRE_CUDA_DEVICE();
  compare_with_cpu(24, 128256, 3);
}

TEST(CudaSample, RunnerSamplesLikeForwardPlusCpuSampler) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  test::TinyLlama m(91);
  CudaRunnerOptions o;
  o.block_size = 4;
  o.num_kv_blocks = 32;
  o.max_batch_tokens = 64;
  o.max_seqs = 4;
  o.max_logits_rows = 8;
  o.max_model_len = 64;
  o.gpu_sampling = true;
  CudaModelRunner runner(
      ctx, m.cfg, [&](const std::string &n) { return m.view(n); }, o);
  ForwardBatch b;
  for (int i = 0; i < 12; ++i) b.tokens.push_back((i * 41 + 7) % 512);
  b.seqs.push_back({0, 7, 0, 0, 2, SequenceSlice::Logits::kLast});
  b.seqs.push_back({7, 5, 0, 2, 2, SequenceSlice::Logits::kAll});
  b.block_table = {0, 1, 5, 6};
  ForwardOutput out;
  runner.forward(b, out);
  ASSERT_EQ(out.row_seq.size(), 6u);
  std::vector<SamplingParams> params(6);
  std::vector<DeviceSampleRow> rows(6);
  std::vector<TokenId> prompt(b.tokens.begin(), b.tokens.begin() + 7), generated = {3, 3, 9};
  for (int r = 0; r < 6; ++r) {
    params[r] = params_for(r + 1);
    std::mt19937_64 draw(50 + r);
    rows[r] = {&params[r], std::uniform_real_distribution<double>(0.0, 1.0)(draw), prompt,
               generated};
  }
  ForwardOutput sampled;
  EXPECT_TRUE(runner.samples_on_device());
  runner.forward_sample(b, rows, sampled);  // recomputes the step: same KV, same logits
  const std::vector<TokenId> &tokens = sampled.sampled;
  const std::vector<float> &lps = sampled.sampled_logprobs;
  ASSERT_EQ(tokens.size(), 6u);
  EXPECT_TRUE(sampled.logits.empty());
  EXPECT_EQ(sampled.row_seq, out.row_seq);
  EXPECT_EQ(sampled.row_pos, out.row_pos);
  for (int r = 0; r < 6; ++r) {
    const std::span<const float> lr(out.logits.data() + std::size_t(r) * 512, 512);
    Sampler cpu(params[r], 50 + r);
    const auto res = cpu.sample(lr, prompt, generated);
    EXPECT_EQ(tokens[r], res.token) << "row " << r;
    EXPECT_NEAR(lps[r], res.logprob, 1e-4);
  }
  SamplingParams bad;
  bad.top_p = 0;
  rows[0].params = &bad;
  EXPECT_THROW(runner.forward_sample(b, rows, sampled), Error);
  rows.pop_back();
  rows[0].params = &params[0];
  EXPECT_THROW(runner.forward_sample(b, rows, sampled), Error);  // 5 rows for 6
}

TEST(CudaSample, RunnerWithoutScratchRefuses) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  test::TinyLlama m(92);
  CudaRunnerOptions o;
  o.block_size = 4;
  o.num_kv_blocks = 8;
  o.max_batch_tokens = 16;
  o.max_seqs = 2;
  o.max_logits_rows = 2;
  o.max_model_len = 32;  // gpu_sampling off (the default)
  CudaModelRunner runner(
      ctx, m.cfg, [&](const std::string &n) { return m.view(n); }, o);
  ForwardBatch b;
  b.tokens = {1, 2};
  b.seqs.push_back({0, 2, 0, 0, 1, SequenceSlice::Logits::kLast});
  b.block_table = {0};
  SamplingParams p;
  const std::vector<DeviceSampleRow> rows = {{&p, 0.5, {}, {}}};
  ForwardOutput out;
  EXPECT_FALSE(runner.samples_on_device());
  try {
    runner.forward_sample(b, rows, out);
    ADD_FAILURE() << "sampled without scratch";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
}

}  // namespace
}  // namespace keel::cuda
