// Structured-output constraints in the engine (issue 17): the row is masked before
// sampling, the constraint advances on each token, a dead end or a refused constraint
// finishes with an error, and the fields cross the IPC boundary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>

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
      : token_(token), count_(count), dead_after_(dead_after), words_((kToyVocab + 31) / 32) {}
  bool compute_mask(std::span<const TokenId> end_ids) override {
    // The engine offers its stop tokens (the request's here) for the end.
    const bool stop_offered = std::find(end_ids.begin(), end_ids.end(), kStop) != end_ids.end();
    if (!stop_offered || accepted_ >= dead_after_) {
      std::fill(words_.begin(), words_.end(), ~0u);  // a dead end allows every token
      return false;
    }
    const TokenId allowed = accepted_ < count_ ? token_ : kStop;
    std::fill(words_.begin(), words_.end(), 0u);
    words_[allowed >> 5] |= 1u << (allowed & 31);
    return true;
  }
  std::span<const std::uint32_t> mask_words() const override { return words_; }
  bool accept(TokenId t) override {
    ++accepted_;
    return t == token_;
  }

 private:
  TokenId token_;
  int count_, dead_after_, accepted_ = 0;
  std::vector<std::uint32_t> words_;
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

// A mask whose computation throws ends its request with the exception's text (a grammar
// bug is not reported as a dead end, nor hidden), on the host and on the device alike;
// fault injection (mask-error) takes the same path, for a served test.
TEST(EngineConstraint, AThrowingMaskEndsTheRequestWithItsText) {
  struct Throwing final : OutputConstraint {
    ScriptedConstraint inner{7, 3, 1000};
    bool compute_mask(std::span<const TokenId> end_ids) override {
      if (++calls == 3) throw Error(ErrorCode::kInternal, "grammar: state 12 has no token table");
      return inner.compute_mask(end_ids);
    }
    std::span<const std::uint32_t> mask_words() const override { return inner.mask_words(); }
    bool accept(TokenId t) override { return inner.accept(t); }
    int calls = 0;
  };
  for (const bool device : {false, true}) {
    EngineConfig cfg = small_config();
    cfg.make_constraint = [](const SamplingParams &) -> std::unique_ptr<OutputConstraint> {
      return std::make_unique<Throwing>();
    };
    ToyEngine e(128, 4, cfg, [device](ToyRunner &r) {
      r.device_sampling = device;
      r.device_masks = device;
    });
    Collector c;
    e->submit(constrained(1, "7", 0.0f), c.sink());
    e->submit(greedy_request(2, random_prompt(2, 9), 5), c.sink());  // unharmed beside it
    ASSERT_TRUE(c.wait_finished(1) && c.wait_finished(2));
    EXPECT_EQ(c.get(1).finish, FinishReason::kError);
    EXPECT_NE(c.get(1).error.find("grammar: state 12 has no token table"), std::string::npos)
        << c.get(1).error;
    EXPECT_EQ(c.get(1).error.find("dead end"), std::string::npos) << c.get(1).error;
    EXPECT_EQ(c.get(1).tokens, (std::vector<TokenId>{7, 7})) << device;
    EXPECT_EQ(c.get(2).finish, FinishReason::kLength);
  }
  ToyEngine e(128, 4, with_factory(1000));
  e->inject_fault(FaultSpec{FaultKind::kMaskError, std::nullopt, 1});
  Collector c;
  e->submit(constrained(1, "7", 0.0f), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).finish, FinishReason::kError);
  EXPECT_NE(c.get(1).error.find("fault injection: mask-error"), std::string::npos)
      << c.get(1).error;
  Collector c2;  // one shot: the next request is served as usual
  e->submit(constrained(2, "7", 0.0f), c2.sink());
  ASSERT_TRUE(c2.wait_finished(1));
  EXPECT_EQ(c2.get(2).tokens, (std::vector<TokenId>{7, 7, 7}));
}

// A runner that samples on its device and applies the masks there gets the constrained
// rows (no fallback to the host), with the same tokens; one that cannot gets a host step.
TEST(EngineConstraint, DeviceMasksSampleOnTheDevice) {
  for (const bool device_masks : {true, false}) {
    ToyEngine e(128, 4, with_factory(1000), [device_masks](ToyRunner &r) {
      r.device_sampling = true;
      r.device_masks = device_masks;
    });
    Collector c;
    e->submit(constrained(1, "7", 0.0f), c.sink());
    e->submit(constrained(2, "42", 1.0f), c.sink());
    ASSERT_TRUE(c.wait_finished(1) && c.wait_finished(2));
    EXPECT_EQ(c.get(1).tokens, (std::vector<TokenId>{7, 7, 7})) << device_masks;
    EXPECT_EQ(c.get(2).tokens, (std::vector<TokenId>{42, 42, 42})) << device_masks;
    EXPECT_EQ(c.get(2).finish, FinishReason::kStop);
    if (device_masks) {
      EXPECT_GT(e.runner->sampled_forwards.load(), 0);
      EXPECT_EQ(e.runner->forwards.load(), 0);
      EXPECT_EQ(e.runner->masked_rows.load(), 8);  // 4 steps x 2 requests
    } else {
      EXPECT_EQ(e.runner->sampled_forwards.load(), 0);
      EXPECT_EQ(e.runner->masked_rows.load(), 0);
    }
  }
  ToyEngine dead(128, 4, with_factory(2), [](ToyRunner &r) {
    r.device_sampling = true;
    r.device_masks = true;
  });
  Collector c;
  dead->submit(constrained(1, "7", 0.0f), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).finish, FinishReason::kError);
  EXPECT_NE(c.get(1).error.find("dead end"), std::string::npos) << c.get(1).error;
  EXPECT_EQ(c.get(1).tokens, (std::vector<TokenId>{7, 7}));
}

// The mask of a step is computed while its forward pass runs: the forward here waits
// (bounded) until the request's mask has been computed, which only a mask made beside
// the forward can satisfy.
TEST(EngineConstraint, MaskIsComputedDuringTheForward) {
  auto computed = std::make_shared<std::atomic<int>>(0);
  EngineConfig cfg = small_config();
  cfg.make_constraint = [computed](const SamplingParams &p) -> std::unique_ptr<OutputConstraint> {
    struct Counting final : OutputConstraint {
      ScriptedConstraint inner;
      std::shared_ptr<std::atomic<int>> n;
      Counting(TokenId t, std::shared_ptr<std::atomic<int>> c) : inner(t, 3, 1000), n(c) {}
      bool compute_mask(std::span<const TokenId> end_ids) override {
        const bool ok = inner.compute_mask(end_ids);
        n->fetch_add(1);
        return ok;
      }
      std::span<const std::uint32_t> mask_words() const override { return inner.mask_words(); }
      bool accept(TokenId t) override { return inner.accept(t); }
    };
    return std::make_unique<Counting>(TokenId(std::stoi(p.constraint_text)), computed);
  };
  auto overlapped = std::make_shared<std::atomic<int>>(0);
  auto sampling = std::make_shared<std::atomic<int>>(0);
  ToyEngine e(128, 4, cfg, [computed, overlapped, sampling](ToyRunner &r) {
    r.on_forward = [computed, overlapped, sampling](const ForwardBatch &b) {
      // Only steps that sample have a mask (a prefill chunk before the last has none).
      if (b.seqs.at(0).logits == SequenceSlice::Logits::kNone) return;
      // The n-th sampling step's mask is the n-th computed (it may be done already).
      const int n = sampling->fetch_add(1) + 1;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (computed->load() < n && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (computed->load() >= n) overlapped->fetch_add(1);
    };
  });
  Collector c;
  e->submit(constrained(1, "7", 0.0f), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).tokens, (std::vector<TokenId>{7, 7, 7}));
  // Every sampling step: the last prefill chunk, 3 tokens and the stop.
  EXPECT_EQ(sampling->load(), 4);
  EXPECT_EQ(overlapped->load(), 4);
}

}  // namespace
}  // namespace keel::test
