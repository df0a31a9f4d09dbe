// The CPU runner on mixtures of experts against HF transformers' float64 reference
// (tests/fixtures/moe_models, made by scripts/ref/moe_fixtures.py on the GPU machine:
// scripts/device/moecpu_h200.sh). Every prompt logprob within 1e-3 and the same greedy
// token wherever the reference's top two logits are more than 1e-3 apart, for each
// prompt alone and again batched with 31 other sequences (prefill and decode). A fixture
// that is absent is skipped, naming the script that makes it.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model_harness.h"
#include "support/paths.h"

namespace keel::test {
namespace {

constexpr double kTol = 1e-3;
constexpr int kOthers = 31;

const std::vector<std::string> kFixtures = {
    "qwen3_moe_f32", "qwen3_moe_bf16",      "qwen3_moe_nonorm_f32", "mixtral_f32",  "glm4_moe_f32",
    "glm4_moe_bf16", "glm4_moe_nonorm_f32", "gpt_oss_f32",          "gpt_oss_bf16",
};

std::vector<TokenId> other_prompt(std::uint32_t seed, int n, int vocab) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    p.push_back(static_cast<TokenId>(3 + (seed >> 8) % (vocab - 3)));
  }
  return p;
}

TokenId argmax(const std::vector<float> &row) {
  return static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Architectures the script makes fixtures for that keel does not load yet; a fixture of
// one is skipped saying so (remove the name when the architecture lands).
const std::vector<std::string> kNotLoadedYet = {};

class MoeVsTransformers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = fixtures_dir() / "moe_models" / GetParam();
    if (!std::filesystem::exists(dir_ / "reference.json"))
      GTEST_SKIP() << "fixture absent: " << dir_
                   << " (made by scripts/ref/moe_fixtures.py; scripts/device/moecpu_h200.sh)";
    std::ifstream(dir_ / "reference.json") >> ref_;
    const auto arch = ref_["arch"].get<std::string>();
    if (std::find(kNotLoadedYet.begin(), kNotLoadedYet.end(), arch) != kNotLoadedYet.end())
      GTEST_SKIP() << arch << ": keel does not load this architecture yet (issue #19)";
  }
  std::filesystem::path dir_;
  nlohmann::json ref_;
};

// The fixture itself: its routing spread tokens over most experts of every MoE layer,
// so that agreement below means the router and every expert were exercised.
TEST_P(MoeVsTransformers, FixtureRoutingUsesMostExperts) {
  ASSERT_FALSE(ref_["routing"].empty());
  for (const auto &layer : ref_["routing"]) {
    const auto counts = layer["expert_tokens"].get<std::vector<int>>();
    const auto used = std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; });
    EXPECT_GE(used * 4, static_cast<long>(counts.size()) * 3) << "layer " << layer["layer"];
  }
}

// The sequence's rows against the reference: prompt logprobs from a prefill whose rows
// are all asked for, then greedy steps, teacher-forced with the reference's tokens so
// that one near-tie cannot derail the rest. `step` runs the fixture sequence's next
// chunk (with whatever company) and returns its logits rows.
template <typename Step>
double compare(const nlohmann::json &p, PagedSeq &seq, Step step) {
  double worst = 0;
  const auto n = static_cast<std::int32_t>(seq.tokens.size());
  const auto rows = step(n, SequenceSlice::Logits::kAll);
  EXPECT_EQ(rows.size(), static_cast<std::size_t>(n));
  const auto &plp = p["prompt_logprobs"];
  for (std::int32_t i = 1; i < n; ++i) {
    const double err = std::abs(rows[i - 1][seq.tokens[i]] - plp[i].get<double>());
    worst = std::max(worst, err);
    EXPECT_LT(err, kTol) << "prompt token " << i;
  }
  std::vector<float> last = rows.back();
  for (const auto &g : p["greedy"]) {
    const TokenId want = g["id"].get<TokenId>();
    if (g["margin"].get<double>() > 1e-3) {
      EXPECT_EQ(argmax(last), want) << "greedy step at pos " << seq.tokens.size();
    }
    for (const auto &t : g["top"]) {
      const double err = std::abs(last[t[0].get<int>()] - t[1].get<double>());
      worst = std::max(worst, err);
      EXPECT_LT(err, kTol) << "top logprob of " << t[0] << " at pos " << seq.tokens.size();
    }
    seq.tokens.push_back(want);
    last = step(1, SequenceSlice::Logits::kLast).back();
  }
  return worst;
}

TEST_P(MoeVsTransformers, AloneMatchesReference) {
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(dir_, ctx, {64, 16});
  ASSERT_TRUE(runner->config().moe);
  const auto &inv = ref_["rotary"]["inv_freq"];
  const auto table = cpu::make_rope_table(runner->config());
  ASSERT_EQ(inv.size(), table.inv_freq.size());
  for (std::size_t i = 0; i < inv.size(); ++i)
    EXPECT_NEAR(table.inv_freq[i], inv[i].get<double>(),
                1e-6 * std::abs(inv[i].get<double>()) + 1e-12)
        << i;
  EXPECT_NEAR(table.attention_scaling, ref_["rotary"]["attention_scaling"].get<double>(), 1e-6);

  double worst = 0;
  std::uint32_t seed = 7;
  for (const auto &p : ref_["prompts"]) {
    BlockHandout blocks(64, seed++);
    PagedSeq seq;
    seq.tokens = p["ids"].get<std::vector<TokenId>>();
    worst = std::max(worst, compare(p, seq, [&](std::int32_t n, SequenceSlice::Logits l) {
                       auto o = run_step(*runner, blocks, {{&seq, n, l}});
                       std::vector<std::vector<float>> rows;
                       for (std::size_t r = 0; r < o.row_seq.size(); ++r)
                         rows.push_back(log_softmax_row(o, r));
                       return rows;
                     }));
  }
  std::printf("%s alone: max |logprob error| = %.3g\n", GetParam().c_str(), worst);
}

// Each reference prompt in the middle of a batch of 32: the 31 others prefill prompts
// of other lengths in the same step, then decode a token each step beside it.
TEST_P(MoeVsTransformers, BatchedWith31OthersMatchesReference) {
  ExecContext ctx(2);
  constexpr std::int32_t kBlocks = 512;
  auto runner = cpu::CpuModelRunner::open(dir_, ctx, {kBlocks, 16});
  const int V = static_cast<int>(runner->config().vocab_size);
  double worst = 0;
  std::uint32_t seed = 11;
  for (const auto &p : ref_["prompts"]) {
    BlockHandout blocks(kBlocks, seed++);
    std::vector<PagedSeq> others(kOthers);
    for (int s = 0; s < kOthers; ++s)
      others[s].tokens =
          other_prompt(seed * 131u + static_cast<std::uint32_t>(s), 1 + (7 * s) % 40, V);
    PagedSeq seq;
    seq.tokens = p["ids"].get<std::vector<TokenId>>();
    worst =
        std::max(worst, compare(p, seq, [&](std::int32_t n, SequenceSlice::Logits l) {
                   std::vector<StepItem> items;
                   for (int s = 0; s < kOthers / 2; ++s) {
                     PagedSeq &q = others[s];
                     items.push_back({&q, static_cast<std::int32_t>(q.tokens.size()) - q.computed,
                                      SequenceSlice::Logits::kLast});
                   }
                   const std::size_t mine = items.size();
                   items.push_back({&seq, n, l});
                   for (int s = kOthers / 2; s < kOthers; ++s) {
                     PagedSeq &q = others[s];
                     items.push_back({&q, static_cast<std::int32_t>(q.tokens.size()) - q.computed,
                                      SequenceSlice::Logits::kLast});
                   }
                   auto o = run_step(*runner, blocks, items);
                   std::vector<std::vector<float>> rows;
                   for (std::size_t r = 0; r < o.row_seq.size(); ++r) {
                     const auto row = log_softmax_row(o, r);
                     const auto at = static_cast<std::size_t>(o.row_seq[r]);
                     if (at == mine)
                       rows.push_back(row);
                     else  // the others go on with their own greedy tokens
                       items[at].seq->tokens.push_back(argmax(row));
                   }
                   return rows;
                 }));
  }
  std::printf("%s batched with %d others: max |logprob error| = %.3g\n", GetParam().c_str(),
              kOthers, worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeVsTransformers, ::testing::ValuesIn(kFixtures),
                         [](const auto &info) { return info.param; });

}  // namespace
}  // namespace keel::test
