// The CPU runner against HF transformers' float32 reference (tests/fixtures/models,
// made by scripts/ref/model_fixtures.py).
//
// Tolerance: 1e-3 on every logprob for every weight dtype. The reference for a bf16 or
// f16 fixture is transformers running the *saved, rounded* weights in float32, which is
// exactly what keel computes, so the only differences are float32 summation order
// (~1e-6 relative); no wider bound is needed for bf16/f16.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model_harness.h"
#include "support/paths.h"

namespace keel::test {
namespace {

constexpr double kTol = 1e-3;

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  const auto dir = fixtures_dir() / "models";
  if (!std::filesystem::exists(dir)) return names;
  for (auto &e : std::filesystem::directory_iterator(dir))
    if (std::filesystem::exists(e.path() / "reference.json"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class VsTransformers : public ::testing::TestWithParam<std::string> {};

TEST_P(VsTransformers, PromptLogprobsAndGreedy) {
  const auto dir = fixtures_dir() / "models" / GetParam();
  nlohmann::json ref;
  std::ifstream(dir / "reference.json") >> ref;
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(dir, ctx, {64, 16});

  // Rotary frequencies as transformers computed them.
  const auto &inv = ref["rotary"]["inv_freq"];
  const auto table = cpu::make_rope_table(runner->config());
  ASSERT_EQ(inv.size(), table.inv_freq.size());
  for (std::size_t i = 0; i < inv.size(); ++i)
    EXPECT_NEAR(table.inv_freq[i], inv[i].get<double>(),
                1e-6 * std::abs(inv[i].get<double>()) + 1e-12)
        << i;
  EXPECT_NEAR(table.attention_scaling, ref["rotary"]["attention_scaling"].get<double>(), 1e-6);

  double worst = 0;
  std::uint32_t seed = 7;
  for (const auto &p : ref["prompts"]) {
    BlockHandout blocks(64, seed++);
    PagedSeq seq;
    seq.tokens = p["ids"].get<std::vector<TokenId>>();
    const auto n = static_cast<std::int32_t>(seq.tokens.size());
    auto out = run_step(*runner, blocks, {{&seq, n, SequenceSlice::Logits::kAll}});
    ASSERT_EQ(out.row_seq.size(), static_cast<std::size_t>(n));
    const auto &plp = p["prompt_logprobs"];
    for (std::int32_t i = 1; i < n; ++i) {
      const auto lp = log_softmax_row(out, i - 1);
      const double err = std::abs(lp[seq.tokens[i]] - plp[i].get<double>());
      worst = std::max(worst, err);
      EXPECT_LT(err, kTol) << "prompt token " << i;
    }
    // Greedy continuation, teacher-forced with the reference's tokens so that one
    // near-tie cannot derail the rest.
    std::vector<float> last = log_softmax_row(out, n - 1);
    for (const auto &step : p["greedy"]) {
      const TokenId want = step["id"].get<TokenId>();
      const TokenId got =
          static_cast<TokenId>(std::max_element(last.begin(), last.end()) - last.begin());
      if (step["margin"].get<double>() > 1e-3)
        EXPECT_EQ(got, want) << "greedy step at pos " << seq.tokens.size();
      for (const auto &t : step["top"]) {
        const double err = std::abs(last[t[0].get<int>()] - t[1].get<double>());
        worst = std::max(worst, err);
        EXPECT_LT(err, kTol) << "top logprob of " << t[0] << " at pos " << seq.tokens.size();
      }
      seq.tokens.push_back(want);
      auto o = run_step(*runner, blocks, {{&seq, 1, SequenceSlice::Logits::kLast}});
      last = log_softmax_row(o, 0);
    }
  }
  RecordProperty("max_logprob_error", std::to_string(worst));
  std::printf("%s: max |logprob error| = %.3g\n", GetParam().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, VsTransformers, ::testing::ValuesIn(fixture_names()),
                         [](const auto &info) { return info.param; });

}  // namespace
}  // namespace keel::test
