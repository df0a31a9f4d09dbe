// Greedy rows sampled inside the lm_head (CpuModelRunner::forward_sample, cpu::linear_argmax)
// pick the tokens an argmax of forward()'s logits picks, prefill and decode, in a batch.
#include <gtest/gtest.h>

#include <span>

#include "exec/cpu/vec_math.h"
#include "model_harness.h"
#include "support/paths.h"

namespace keel::test {
namespace {

std::vector<std::vector<TokenId>> decode_three(ModelRunner &runner, bool greedy_head, int steps) {
  const int V = static_cast<int>(runner.config().vocab_size);
  BlockHandout blocks(128, 5);
  std::vector<PagedSeq> seqs(3);
  const int lens[3] = {9, 23, 4};
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < lens[s]; ++i) seqs[s].tokens.push_back(3 + (17 * i + 5 * s) % (V - 3));
  std::vector<StepItem> items;
  for (int s = 0; s < 3; ++s) items.push_back({&seqs[s], lens[s], SequenceSlice::Logits::kLast});
  for (int k = 0; k < steps; ++k) {
    const ForwardOutput o = run_step(runner, blocks, items, greedy_head);
    EXPECT_EQ(o.row_seq.size(), 3u);
    for (int s = 0; s < 3; ++s) {
      const TokenId t = greedy_head ? o.sampled.at(s)
                                    : static_cast<TokenId>(cpu::first_argmax(std::span<const float>(
                                          o.logits.data() + static_cast<std::size_t>(s) * V, V)));
      if (greedy_head) EXPECT_TRUE(o.logits.empty());
      seqs[s].tokens.push_back(t);
      items[s].n = 1;
    }
  }
  std::vector<std::vector<TokenId>> out;
  for (auto &s : seqs) out.push_back(s.tokens);
  return out;
}

TEST(CpuGreedyHead, SameTokensAsArgmaxOfTheLogits) {
  const auto dir = fixtures_dir() / "models/qwen3_f32";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "missing fixture " << dir;
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(dir, ctx, {128, 16});
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_TRUE(runner->samples_on_device());
  EXPECT_TRUE(runner->samples_row_on_device(greedy));
  SamplingParams logprobs = greedy;
  logprobs.logprobs = 0;  // the chosen token's logprob needs the row's normaliser
  EXPECT_FALSE(runner->samples_row_on_device(logprobs));
  SamplingParams penalty = greedy;
  penalty.repetition_penalty = 1.1f;
  EXPECT_FALSE(runner->samples_row_on_device(penalty));
  EXPECT_FALSE(runner->samples_row_on_device(SamplingParams{}));  // temperature 1

  const auto want = decode_three(*runner, false, 6);
  const auto got = decode_three(*runner, true, 6);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace keel::test
