// The thinking budget closes the think block after N tokens by writing its end tokens in
// place of what was sampled, and otherwise passes every token through.
#include "core/thinking_budget.h"

#include <gtest/gtest.h>

#include <vector>

namespace keel {
namespace {

constexpr TokenId kStart = 900, kEnd1 = 901, kEnd2 = 902;

SamplingParams budget(std::int32_t n, bool open) {
  SamplingParams s;
  s.thinking_budget = n;
  s.thinking_start = {kStart};
  s.thinking_end = {kEnd1, kEnd2};
  s.thinking_open = open;
  return s;
}

std::vector<TokenId> run(ThinkingBudget &b, const std::vector<TokenId> &sampled) {
  std::vector<TokenId> out;
  for (TokenId t : sampled) out.push_back(b.choose(t));
  return out;
}

TEST(ThinkingBudget, ClosesAnOpenBlockAfterTheBudgetAndThenPassesTokensThrough) {
  ThinkingBudget b(budget(3, true));
  EXPECT_EQ(run(b, {1, 2, 3, 4, 5, 6, 7}), (std::vector<TokenId>{1, 2, 3, kEnd1, kEnd2, 6, 7}));
  EXPECT_EQ(b.forced(), 2);
}

TEST(ThinkingBudget, CountsFromTheModelsOwnStartTokens) {
  ThinkingBudget b(budget(2, false));
  EXPECT_EQ(run(b, {5, kStart, 1, 2, 3, 4}), (std::vector<TokenId>{5, kStart, 1, 2, kEnd1, kEnd2}));
}

TEST(ThinkingBudget, LeavesABlockTheModelClosedWithinBudget) {
  ThinkingBudget b(budget(4, true));
  EXPECT_EQ(run(b, {1, kEnd1, kEnd2, 7, 8, 9, 10}),
            (std::vector<TokenId>{1, kEnd1, kEnd2, 7, 8, 9, 10}));
  EXPECT_EQ(b.forced(), 0);
}

TEST(ThinkingBudget, DoesNothingWithoutABlockOrABudget) {
  ThinkingBudget late(budget(1, false));  // no start among the first tokens
  EXPECT_EQ(run(late, {1, 2, 3, 4, 5, kStart, 6, 7, 8}),
            (std::vector<TokenId>{1, 2, 3, 4, 5, kStart, 6, 7, 8}));
  SamplingParams none = budget(-1, true);
  EXPECT_FALSE(ThinkingBudget::wanted(none));
  ThinkingBudget off(none);
  EXPECT_EQ(run(off, {1, 2, 3}), (std::vector<TokenId>{1, 2, 3}));
}

TEST(ThinkingBudget, AZeroBudgetClosesAtOnce) {
  ThinkingBudget b(budget(0, true));
  EXPECT_EQ(run(b, {1, 2, 3}), (std::vector<TokenId>{kEnd1, kEnd2, 3}));
}

}  // namespace
}  // namespace keel
