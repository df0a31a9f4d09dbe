// Sampling on the device against the CPU Sampler (exec/sampler.h) on the same logits,
// parameters and random draws: every sampled token equal, logprobs within 1e-4.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>

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

struct DeviceSampled {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs, logits_after;
};

// launch_sample over host rows; returns its tokens, logprobs and the logits afterwards.
DeviceSampled sample_on_device(CudaContext &ctx, const std::vector<float> &logits, int R, int V,
                               const std::vector<SampleRow> &rows,
                               const std::vector<PenaltyEntry> &entries) {
  auto d_logits = test::upload(ctx, logits);
  auto d_rows = test::upload(ctx, rows);
  auto d_entries = test::upload(ctx, entries);
  DeviceBuffer scratch(sample_scratch_bytes(R, V)), tokens(R * 4), lps(R * 4);
  test::poison(ctx, tokens);
  test::poison(ctx, scratch);  // nothing may rely on a zeroed scratch
  launch_sample(ctx.compute(), d_logits.as<float>(), R, V, d_rows.as<SampleRow>(),
                d_entries.as<PenaltyEntry>(), scratch.data(), scratch.bytes(),
                tokens.as<std::int32_t>(), lps.as<float>());
  return {test::download<std::int32_t>(ctx, tokens, R), test::download<float>(ctx, lps, R),
          test::download<float>(ctx, d_logits, logits.size())};
}

// ties: logits rounded to halves, so many candidates share a value (greedy and the
// sort must both prefer the lowest id); greedy_only: every row greedy (nothing sorted);
// first_set: row r takes params_for(first_set + r).
void compare_with_cpu(int R, int V, std::uint32_t seed, bool ties = false, bool greedy_only = false,
                      int first_set = 0) {
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
    row.params = params_for(greedy_only ? (r % 2) * 6 : first_set + r);  // 0, 6: greedy
    row.seed = 1000 + r;
    // Tokens near the top of the row, so penalties change what is sampled.
    for (int i = 0; i < 30; ++i) row.prompt.push_back(static_cast<TokenId>(rng() % V));
    for (int i = 0; i < 12; ++i) row.generated.push_back(static_cast<TokenId>(rng() % 50));
    const std::span<const float> lr(logits.data() + std::size_t(r) * V, V);
    Sampler sampler(row.params, row.seed);
    const SampledToken res = sampler.sample(lr, row.prompt, row.generated);
    cpu_tokens[r] = res.token;
    cpu_logprobs[r] = logprobs_of(lr, res.token, 0).logprob;  // sample() fills it only when asked
    // The same draw the CPU sampler made.
    std::mt19937_64 draw(row.seed);
    // The conversion CudaModelRunner::forward_sample stages.
    const DeviceSampleRow dr{&row.params, std::uniform_real_distribution<double>(0.0, 1.0)(draw),
                             row.prompt, row.generated};
    dev_rows[r] = to_sample_row(dr, V, r, entries);
  }
  const DeviceSampled dev = sample_on_device(ctx, logits, R, V, dev_rows, entries);
  const auto &got = dev.tokens;
  const auto &got_lp = dev.logprobs;
  EXPECT_EQ(dev.logits_after, logits) << "logits must be left unchanged";
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(got[r], cpu_tokens[r])
        << "R " << R << " V " << V << " row " << r << " params set " << (first_set + r) % 8;
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

// The filter (only the candidates the walk can reach are sorted) against the CPU
// Sampler given the same draw u: peaked rows (sigma 8: a handful of candidates hold the
// mass) and flat ones (sigma 1: too many candidates, the full sort), draws near 0 and
// near 1 (u + margin >= 1 always takes the full sort), temperature only, min_p alone
// (the filter keeps every candidate min_p keeps), top_k within and beyond the
// filter's capacity, top_p, penalties.
TEST(CudaSample, FilteredAndFullSortRowsMatchCpuSamplerForGivenDraws) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const int V = 128256;
  // Not nearer 1 than 1e-5: at u = 1 - 1e-9 the crossing falls among ~1e-14-probability
  // tail candidates, where summation order alone (sequential on the CPU, block scans here)
  // moves it -- both are then equally valid draws (seen on the H200: row 49, full sort).
  const double draws[] = {0.0, 1e-9, 0.25, 0.5, 0.9, 0.9999, 0.99995, 0.99999};
  std::vector<SamplingParams> sets(7);
  sets[0].temperature = 1.0f;
  sets[1].temperature = 0.6f, sets[1].min_p = 0.1f;
  sets[2].temperature = 1.0f, sets[2].min_p = 1e-6f;
  sets[3].temperature = 0.8f, sets[3].top_k = 50;
  sets[4].temperature = 1.2f, sets[4].top_k = 6000;  // beyond the filter's capacity
  sets[5].temperature = 0.9f, sets[5].top_p = 0.95f;
  sets[6].temperature = 1.0f, sets[6].top_p = 0.7f, sets[6].repetition_penalty = 1.3f,
  sets[6].presence_penalty = 0.4f;
  const int R = 2 * 8 * 7;  // sigma x draw x parameter set
  std::mt19937 rng(77);
  std::vector<float> logits(std::size_t(R) * V);
  std::vector<SampleRow> dev_rows(R);
  std::vector<PenaltyEntry> entries;
  std::vector<TokenId> cpu_tokens(R);
  std::vector<float> cpu_lp(R);
  const std::vector<TokenId> prompt = {5, 17, 17, 99, 1000}, generated = {17, 4, 4};
  for (int r = 0; r < R; ++r) {
    const float sigma = r < R / 2 ? 8.0f : 1.0f;
    const double u = draws[(r / 7) % 8];
    const SamplingParams &p = sets[r % 7];
    std::normal_distribution<float> nd(0.0f, sigma);
    const std::span<float> lr(logits.data() + std::size_t(r) * V, V);
    for (auto &x : lr) x = nd(rng);
    Sampler cpu(p, 0);
    const SampledToken res = cpu.sample_with(lr, prompt, generated, u);
    cpu_tokens[r] = res.token;
    cpu_lp[r] = logprobs_of(lr, res.token, 0).logprob;
    dev_rows[r] = to_sample_row(DeviceSampleRow{&p, u, prompt, generated}, V, r, entries);
  }
  const DeviceSampled dev = sample_on_device(ctx, logits, R, V, dev_rows, entries);
  const auto &got = dev.tokens;
  const auto &got_lp = dev.logprobs;
  std::set<TokenId> distinct;
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(got[r], cpu_tokens[r]) << "row " << r << " set " << r % 7 << " u "
                                     << draws[(r / 7) % 8] << (r < R / 2 ? " peaked" : " flat");
    EXPECT_NEAR(got_lp[r], cpu_lp[r], 1e-4) << "row " << r;
    distinct.insert(cpu_tokens[r]);
  }
  EXPECT_GT(distinct.size(), 20u);  // the rows really sampled different candidates
}

TEST(CudaSample, MatchesCpuSamplerLlama3Vocab) {
  KEEL_REQUIRE_CUDA_DEVICE();
  compare_with_cpu(24, 128256, 3);
}

// ---- Rows split over several blocks (small batches) ----

// One row to sample: its logits, parameters, draw and penalty context.
struct DrawCase {
  std::vector<float> logits;
  SamplingParams params;
  double u = 0;
  std::vector<TokenId> prompt, generated;
};

std::vector<float> normal_row(int V, float sigma, std::mt19937 &rng) {
  std::normal_distribution<float> nd(0.0f, sigma);
  std::vector<float> row(V);
  for (auto &x : row) x = nd(rng);
  return row;
}

// Samples `cases` as one batch of R = cases.size() rows and checks every row against the
// CPU Sampler given the same draw. Returns the CPU tokens.
std::vector<TokenId> expect_batch_matches_cpu(CudaContext &ctx, int V,
                                              const std::vector<DrawCase> &cases,
                                              const std::string &what) {
  const int R = static_cast<int>(cases.size());
  std::vector<float> logits;
  logits.reserve(std::size_t(R) * V);
  std::vector<SampleRow> dev_rows(R);
  std::vector<PenaltyEntry> entries;
  std::vector<TokenId> cpu_tokens(R);
  std::vector<float> cpu_lp(R);
  for (int r = 0; r < R; ++r) {
    const DrawCase &c = cases[r];
    logits.insert(logits.end(), c.logits.begin(), c.logits.end());
    Sampler cpu(c.params, 0);
    const SampledToken res = cpu.sample_with(c.logits, c.prompt, c.generated, c.u);
    cpu_tokens[r] = res.token;
    cpu_lp[r] = logprobs_of(c.logits, res.token, 0).logprob;
    dev_rows[r] =
        to_sample_row(DeviceSampleRow{&c.params, c.u, c.prompt, c.generated}, V, r, entries);
  }
  const DeviceSampled dev = sample_on_device(ctx, logits, R, V, dev_rows, entries);
  for (int r = 0; r < R; ++r) {
    EXPECT_EQ(dev.tokens[r], cpu_tokens[r])
        << what << ": R " << R << " V " << V << " row " << r << " u " << cases[r].u
        << " temperature " << cases[r].params.temperature;
    EXPECT_NEAR(dev.logprobs[r], cpu_lp[r], 1e-4) << what << ": row " << r;
  }
  return cpu_tokens;
}

// Batches of 1-8 rows (each row over many blocks): every parameter set, with the vocab a
// multiple of 4 (vector loads) or not, and a vocab within one block's chunk.
void small_batches(const std::vector<int> &vocabs) {
  std::uint32_t seed = 300;
  for (int V : vocabs)
    for (int R : {1, 2, 5, 8})
      for (int first : {0, 3, 5}) compare_with_cpu(R, V, ++seed, false, false, first);
}

TEST(CudaSample, SmallBatchesMatchCpuSampler) {
  KEEL_REQUIRE_CUDA_DEVICE();
  small_batches({128256, 50001});
}

TEST(CudaSample, SmallBatchesSmallVocab) {  // also the sanitizers' case
  KEEL_REQUIRE_CUDA_DEVICE();
  small_batches({8192, 8195, 1500});
}

// Plain temperature rows, the draws spread over (0, 1): flat rows (sigma 1-2: thousands of
// candidates near the draw) sort only the run of buckets around it, peaked ones (sigma 8)
// the top. One row at a time, then all in one batch.
void plain_temperature_windows(int V) {
  CudaContext ctx;
  std::mt19937 rng(V);
  const double draws[] = {0.0, 0.001, 0.2, 0.5, 0.8, 0.97, 0.999, 0.9999};
  std::vector<DrawCase> all;
  for (float sigma : {1.0f, 2.0f, 8.0f})
    for (float temperature : {1.0f, 0.7f})
      for (double u : draws) {
        DrawCase c;
        c.logits = normal_row(V, sigma, rng);
        c.params.temperature = temperature;
        c.u = u;
        all.push_back(c);
      }
  std::set<TokenId> distinct;
  for (const DrawCase &c : all) {
    const auto t = expect_batch_matches_cpu(ctx, V, {c}, "one row");
    distinct.insert(t[0]);
  }
  expect_batch_matches_cpu(ctx, V, all, "batch");
  EXPECT_GT(distinct.size(), all.size() / 2);  // the draws really picked different tokens
}

TEST(CudaSample, PlainTemperatureWindowsMatchCpuSampler) {
  KEEL_REQUIRE_CUDA_DEVICE();
  plain_temperature_windows(128256);
  plain_temperature_windows(100003);
}

// Penalties on tokens in different parts of the row decide the token: three spikes (in the
// first part, the middle, the last) over flat noise; penalties move which one wins, also
// upwards (a repetition penalty of 0.5 doubles a positive logit), and tie two of them.
void penalties_across_parts(int V) {
  CudaContext ctx;
  std::mt19937 rng(V + 1);
  const TokenId t1 = 3, t2 = V / 2 + 1, t3 = V - 2;
  std::vector<float> base = normal_row(V, 1.0f, rng);
  base[t1] = 20.0f, base[t2] = 19.5f, base[t3] = 19.0f;
  struct Want {
    DrawCase c;
    TokenId greedy;  // the token a greedy row must give, or -1
  };
  std::vector<Want> wants;
  auto add = [&](float temperature, float rep, float presence, std::vector<TokenId> prompt,
                 std::vector<TokenId> generated, double u, TokenId greedy) {
    Want w;
    w.c.logits = base;
    w.c.params.temperature = temperature;
    w.c.params.repetition_penalty = rep;
    w.c.params.presence_penalty = presence;
    w.c.prompt = std::move(prompt);
    w.c.generated = std::move(generated);
    w.c.u = u;
    w.greedy = greedy;
    wants.push_back(w);
  };
  add(0, 1.0f, 0, {}, {}, 0, t1);               // no penalty: the first part's spike
  add(0, 2.0f, 0, {t1, t2, 7}, {}, 0, t3);      // both earlier spikes halved: the last
  add(0, 1.0f, 15.0f, {}, {t1, t1, 9}, 0, t2);  // presence on the first: the middle
  add(0, 0.5f, 0, {t3}, {}, 0, t3);             // raised from 19 to 38: the last
  add(1.0f, 2.0f, 0, {t1, t2}, {}, 0.3, -1);    // temperature rows: the CPU decides
  add(1.0f, 2.0f, 0, {t1, t2}, {}, 0.9, -1);
  add(0.8f, 0.5f, 2.0f, {t3, 11}, {t1, t2}, 0.5, -1);
  add(1.0f, 1.0f, 1.0f, {}, {t2, t3, t3}, 0.99, -1);
  std::vector<DrawCase> cases;
  for (const Want &w : wants) cases.push_back(w.c);
  const auto batch = expect_batch_matches_cpu(ctx, V, cases, "batch");
  for (std::size_t i = 0; i < wants.size(); ++i) {
    const auto one = expect_batch_matches_cpu(ctx, V, {wants[i].c}, "one row");
    EXPECT_EQ(one[0], batch[i]);
    if (wants[i].greedy >= 0) {
      EXPECT_EQ(one[0], wants[i].greedy) << "case " << i;
    }
  }
}

TEST(CudaSample, PenaltiesInDifferentPartsMatchCpuSampler) {
  KEEL_REQUIRE_CUDA_DEVICE();
  penalties_across_parts(128256);
}

TEST(CudaSample, PenaltiesInDifferentPartsSmallVocab) {
  KEEL_REQUIRE_CUDA_DEVICE();
  penalties_across_parts(12290);
}

// The same scratch twice (poisoned first): the second launch must not see the first's
// merge state, and both give bit-identical tokens and logprobs.
void repeated_launches(int V) {
  CudaContext ctx;
  std::mt19937 rng(V + 2);
  for (int R : {1, 3, 64}) {
    std::vector<float> logits;
    std::vector<SampleRow> rows(R);
    std::vector<PenaltyEntry> entries;
    std::vector<SamplingParams> params(R);
    for (int r = 0; r < R; ++r) {
      const auto row = normal_row(V, r % 2 ? 1.0f : 8.0f, rng);
      logits.insert(logits.end(), row.begin(), row.end());
      params[r] = params_for(r + 1);
      const std::vector<TokenId> prompt = {1, 2, static_cast<TokenId>(V - 1)}, generated = {2};
      rows[r] = to_sample_row(DeviceSampleRow{&params[r], 0.37 + 0.006 * r, prompt, generated}, V,
                              r, entries);
    }
    auto d_logits = test::upload(ctx, logits);
    auto d_rows = test::upload(ctx, rows);
    auto d_entries = test::upload(ctx, entries);
    DeviceBuffer scratch(sample_scratch_bytes(R, V)), tokens(R * 4), lps(R * 4);
    test::poison(ctx, scratch);
    std::vector<std::int32_t> first_tokens;
    std::vector<float> first_lps;
    for (int pass = 0; pass < 2; ++pass) {
      test::poison(ctx, tokens);
      launch_sample(ctx.compute(), d_logits.as<float>(), R, V, d_rows.as<SampleRow>(),
                    d_entries.as<PenaltyEntry>(), scratch.data(), scratch.bytes(),
                    tokens.as<std::int32_t>(), lps.as<float>());
      const auto t = test::download<std::int32_t>(ctx, tokens, R);
      const auto l = test::download<float>(ctx, lps, R);
      if (pass == 0) {
        first_tokens = t;
        first_lps = l;
        for (int r = 0; r < R; ++r) {
          EXPECT_GE(t[r], 0);
          EXPECT_LT(t[r], V);
        }
      } else {
        EXPECT_EQ(t, first_tokens) << "R " << R;
        for (int r = 0; r < R; ++r)
          EXPECT_EQ(std::memcmp(&l[r], &first_lps[r], 4), 0) << "R " << R << " row " << r;
      }
    }
  }
}

TEST(CudaSample, RepeatedLaunchesAreIdentical) {
  KEEL_REQUIRE_CUDA_DEVICE();
  repeated_launches(128256);
}

TEST(CudaSample, RepeatedLaunchesAreIdenticalSmallVocab) {
  KEEL_REQUIRE_CUDA_DEVICE();
  repeated_launches(6001);
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
    EXPECT_NEAR(lps[r], logprobs_of(lr, res.token, 0).logprob, 1e-4);
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
