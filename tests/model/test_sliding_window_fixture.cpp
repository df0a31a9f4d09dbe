// The sliding-window fixture (tests/fixtures/models/mistral_sw8_bf16, made by
// scripts/ref/sliding_window_fixture.py): a tiny Mistral with sliding_window 8 whose
// prompts run to several windows. VsTransformers (test_cpu_vs_transformers.cpp) and the
// CUDA CudaVsTransformers compare the runners with it like every fixture; this test makes
// sure the fixture can tell a window from none: the CPU runner reproduces it with the
// window, and misses it by far past the window when the window is dropped.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/model_weights.h"
#include "model_harness.h"
#include "support/paths.h"

namespace keel::test {
namespace {

// Worst |logprob error| against the reference prompt logprobs, at targets before and
// from the window on.
struct Errors {
  double before = 0, after = 0;
};

Errors prompt_errors(cpu::CpuModelRunner &runner, const nlohmann::json &ref, int window) {
  Errors e;
  std::uint32_t seed = 3;
  for (const auto &p : ref["prompts"]) {
    BlockHandout blocks(64, seed++);
    PagedSeq seq;
    seq.tokens = p["ids"].get<std::vector<TokenId>>();
    const auto n = static_cast<std::int32_t>(seq.tokens.size());
    // Chunks of 5 over the paged cache, every row's logits.
    std::vector<float> lp_of_next(n, 0.0f);
    for (std::int32_t done = 0; done < n;) {
      const std::int32_t k = std::min(5, n - done);
      const auto out = run_step(runner, blocks, {{&seq, k, SequenceSlice::Logits::kAll}});
      for (std::int32_t r = 0; r < k; ++r) {
        const std::int32_t pos = done + r;
        if (pos + 1 >= n) continue;
        const double err = std::abs(log_softmax_row(out, r)[seq.tokens[pos + 1]] -
                                    p["prompt_logprobs"][pos + 1].get<double>());
        double &worst = pos < window ? e.before : e.after;
        worst = std::max(worst, err);
      }
      done += k;
    }
  }
  return e;
}

TEST(SlidingWindowFixture, CpuRunnerNeedsTheWindow) {
  const auto dir = fixtures_dir() / "models" / "mistral_sw8_bf16";
  ASSERT_TRUE(std::filesystem::exists(dir / "reference.json")) << dir;
  nlohmann::json ref;
  std::ifstream(dir / "reference.json") >> ref;
  const int window = ref["sliding_window"].get<int>();
  auto weights = std::shared_ptr<ModelWeights>(ModelWeights::open(dir));
  ASSERT_EQ(weights->config().sliding_window.value_or(0), window);
  int longest = 0;
  for (const auto &p : ref["prompts"]) longest = std::max<int>(longest, p["ids"].size());
  ASSERT_GE(longest, 4 * window);

  arch::WeightLookup lookup =
      [w = weights.get()](const std::string &n) -> std::optional<TensorView> {
    if (const TensorView *t = w->find(n)) return *t;
    return std::nullopt;
  };
  ExecContext ctx(2);
  cpu::CpuModelRunner with(weights->config(), lookup, weights, ctx, {64, 4});
  ModelConfig none = weights->config();
  none.sliding_window.reset();
  cpu::CpuModelRunner without(none, lookup, weights, ctx, {64, 4});
  const Errors ew = prompt_errors(with, ref, window), en = prompt_errors(without, ref, window);
  std::printf(
      "window %d: with it max err %.3g / %.3g (before / past the window), without %.3g / %.3g\n",
      window, ew.before, ew.after, en.before, en.after);
  EXPECT_LT(ew.before, 1e-3);
  EXPECT_LT(ew.after, 1e-3);
  EXPECT_LT(en.before, 1e-3);  // the window changes nothing before it fills
  EXPECT_GT(en.after, 0.5);    // and a great deal after
}

}  // namespace
}  // namespace keel::test
