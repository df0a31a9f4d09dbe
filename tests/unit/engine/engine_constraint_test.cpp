// Structured-output constraints in the engine (issue 17): the row is masked before
// sampling, the constraint advances on each token, a dead end or a refused constraint
// finishes with an error, and the fields cross the IPC boundary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "collector.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

constexpr TokenId kStop = 99;

// Allows only `token` for `count` steps, then only kStop; a dead end after `dead_after`.
class ScriptedConstraint final : public OutputConstraint {
 public:
  ScriptedConstraint(TokenId token, int count, int dead_after)
      : token_(token), count_(count), dead_after_(dead_after) {}
  bool mask_logits(std::span<float> logits, std::span<const TokenId> end_ids) override {
    // The engine offers its stop tokens (the request's here) for the end.
    if (std::find(end_ids.begin(), end_ids.end(), kStop) == end_ids.end()) return false;
    if (accepted_ >= dead_after_) return false;
    const TokenId allowed = accepted_ < count_ ? token_ : kStop;
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (TokenId(i) != allowed) logits[i] = -std::numeric_limits<float>::infinity();
    return true;
  }
  bool accept(TokenId t) override {
    ++accepted_;
    return t == token_;
  }

 private:
  TokenId token_;
  int count_, dead_after_, accepted_ = 0;
};

EngineConfig with_factory(int dead_after) {
  EngineConfig cfg = small_config();
  cfg.make_constraint = [dead_after](const SamplingParams &p) -> std::unique_ptr<OutputConstraint> {
    if (p.constraint_text == "bad") throw Error(ErrorCode::kInvalidArgument, "schema: bad");
    return std::make_unique<ScriptedConstraint>(TokenId(std::stoi(p.constraint_text)), 3,
                                                dead_after);
  };
  return cfg;
}

GenerationRequest constrained(std::uint64_t id, const std::string &text, float temperature) {
  GenerationRequest r = greedy_request(id, random_prompt(unsigned(id), 9), 20);
  r.sampling.temperature = temperature;
  r.sampling.stop_token_ids = {kStop};
  r.sampling.constraint_kind = "regex";
  r.sampling.constraint_text = text;
  return r;
}

TEST(EngineConstraint, MaskDecidesTheTokensAndTheEnd) {
  ToyEngine e(128, 4, with_factory(1000));
  Collector c;
  e->submit(constrained(1, "7", 0.0f), c.sink());
  e->submit(constrained(2, "42", 1.0f), c.sink());
  e->submit(greedy_request(3, random_prompt(3, 9), 5), c.sink());  // unconstrained beside
  ASSERT_TRUE(c.wait_finished(1) && c.wait_finished(2) && c.wait_finished(3));
  EXPECT_EQ(c.get(1).tokens, (std::vector<TokenId>{7, 7, 7}));
  EXPECT_EQ(c.get(1).finish, FinishReason::kStop);
  EXPECT_EQ(c.get(2).tokens, (std::vector<TokenId>{42, 42, 42}));
  EXPECT_EQ(c.get(2).finish, FinishReason::kStop);
  EXPECT_EQ(c.get(3).tokens, toy_greedy(random_prompt(3, 9), 5, kToyVocab));
}

TEST(EngineConstraint, DeadEndAndRefusedConstraintsFinishWithErrors) {
  ToyEngine e(128, 4, with_factory(2));
  Collector c;
  e->submit(constrained(1, "7", 0.0f), c.sink());
  e->submit(constrained(2, "bad", 0.0f), c.sink());
  ASSERT_TRUE(c.wait_finished(1) && c.wait_finished(2));
  EXPECT_EQ(c.get(1).finish, FinishReason::kError);
  EXPECT_NE(c.get(1).error.find("dead end"), std::string::npos) << c.get(1).error;
  EXPECT_EQ(c.get(1).tokens, (std::vector<TokenId>{7, 7}));
  EXPECT_EQ(c.get(2).finish, FinishReason::kError);
  EXPECT_NE(c.get(2).error.find("schema: bad"), std::string::npos) << c.get(2).error;

  ToyEngine plain(128, 4, small_config());  // no factory: refused, not ignored
  Collector c2;
  plain->submit(constrained(1, "7", 0.0f), c2.sink());
  ASSERT_TRUE(c2.wait_finished(1));
  EXPECT_EQ(c2.get(1).finish, FinishReason::kError);
  EXPECT_NE(c2.get(1).error.find("structured output"), std::string::npos);
}

}  // namespace
}  // namespace keel::test
