// Structured output on the device sampler (issue 17): the mask kernel against its CPU
// reference, and the runner sampling masked rows on the device exactly as the CPU
// Sampler samples the same logits masked on the host (one bitmask upload per step).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "core/output_constraint.h"
#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/k_token_mask.h"
#include "exec/sampler.h"
#include "tiny_llama.h"

namespace keel::cuda {
namespace {

using test::download;
using test::upload;

std::vector<std::uint32_t> random_mask(int V, std::mt19937 &rng, int allowed) {
  std::vector<std::uint32_t> m((V + 31) / 32, 0);
  for (int i = 0; i < allowed; ++i) {
    const int t = int(rng() % V);
    m[t / 32] |= 1u << (t % 32);
  }
  return m;
}

TEST(CudaTokenMask, KernelMatchesReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  std::mt19937 rng(3);
  for (const int V : {31, 32, 6001, 151936}) {
    const int R = 5, W = (V + 31) / 32;
    std::vector<float> logits(std::size_t(R) * V);
    for (auto &x : logits) x = float(rng() % 1000) / 100.0f - 5.0f;
    // Rows 0 and 3 unmasked; row 4 shares mask 0; a full word and an empty one in mask 1.
    std::vector<std::int32_t> row_mask = {-1, 0, 1, -1, 0};
    std::vector<std::uint32_t> masks = random_mask(V, rng, 50);
    auto m1 = random_mask(V, rng, 3);
    m1[0] = ~0u;
    masks.insert(masks.end(), m1.begin(), m1.end());
    auto d_logits = upload(ctx, logits);
    auto d_masks = upload(ctx, masks);
    auto d_rows = upload(ctx, row_mask);
    launch_apply_token_masks(ctx.compute(), d_logits.as<float>(), R, V, d_masks.as<std::uint32_t>(),
                             d_rows.as<std::int32_t>());
    const auto got = download<float>(ctx, d_logits, logits.size());
    apply_token_masks_reference(logits.data(), R, V, masks.data(), row_mask.data());
    for (std::size_t i = 0; i < logits.size(); ++i)
      ASSERT_EQ(got[i], logits[i]) << "V " << V << " at " << i << " W " << W;
  }
}

TEST(CudaTokenMask, RunnerSamplesMaskedRowsLikeTheHost) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  test::TinyLlama m(93);
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
  ASSERT_TRUE(runner.masks_on_device());
  const int V = int(m.cfg.vocab_size);
  ForwardBatch b;
  for (int i = 0; i < 10; ++i) b.tokens.push_back((i * 37 + 5) % V);
  b.seqs.push_back({0, 6, 0, 0, 2, SequenceSlice::Logits::kLast});
  b.seqs.push_back({6, 4, 0, 2, 1, SequenceSlice::Logits::kLast});
  b.block_table = {0, 1, 5};
  ForwardOutput out;
  runner.forward(b, out);
  ASSERT_EQ(out.row_seq.size(), 2u);
  std::mt19937 rng(8);
  // Row 0 greedy, row 1 at temperature 1: each allowed a few tokens, not its argmax.
  std::vector<std::vector<std::uint32_t>> masks = {random_mask(V, rng, 4), random_mask(V, rng, 7)};
  for (int r = 0; r < 2; ++r) {
    const float *row = out.logits.data() + std::size_t(r) * V;
    const int best = int(std::max_element(row, row + V) - row);
    masks[r][best / 32] &= ~(1u << (best % 32));
  }
  std::vector<SamplingParams> params(2);
  params[1].temperature = 1.0f;
  int ready_calls = 0;
  const std::function<void()> ready = [&] { ++ready_calls; };
  std::vector<DeviceSampleRow> rows(2);
  for (int r = 0; r < 2; ++r) {
    rows[r].params = &params[r];
    rows[r].u = 0.37 + 0.2 * r;
    rows[r].mask = masks[r];
    rows[r].mask_ready = &ready;
  }
  ForwardOutput sampled;
  runner.forward_sample(b, rows, sampled);  // recomputes the step: same KV, same logits
  EXPECT_EQ(ready_calls, 2);
  ASSERT_EQ(sampled.sampled.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> masked(out.logits.begin() + std::size_t(r) * V,
                              out.logits.begin() + std::size_t(r + 1) * V);
    apply_token_mask(masked, masks[r]);
    Sampler cpu(params[r], 0);
    const auto want = cpu.sample_with(masked, {}, {}, rows[r].u);
    const TokenId t = sampled.sampled[r];
    EXPECT_EQ(t, want.token) << "row " << r;
    EXPECT_TRUE((masks[r][t / 32] >> (t % 32)) & 1u) << "row " << r << " sampled " << t;
  }
}

}  // namespace
}  // namespace keel::cuda
