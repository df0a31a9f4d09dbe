// min_tokens (vLLM's meaning): a stop token (stop_token_ids, or the model's eos unless
// ignore_eos) cannot end a request before it has min_tokens output tokens; the engine
// masks those tokens' logits until then. Checked token for token against the toy model's
// greedy choice with the stop tokens removed, on the host and the device sampling
// paths, with speculative drafts that propose the stop token, and under a structured
// output whose document is complete (then its end still ends it).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "collector.h"
#include "engine/engine.h"
#include "engine/token_sampling.h"
#include "engine_test_util.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Greedy over the toy model where only `allowed` tokens may be chosen (all when empty),
// the `stops` masked while fewer than `min_tokens` are out; a stop ends it (not emitted).
std::vector<TokenId> masked_greedy(std::vector<TokenId> history, int max_tokens,
                                   const std::vector<TokenId> &stops, int min_tokens,
                                   const std::vector<TokenId> &allowed = {}) {
  std::vector<TokenId> out;
  std::vector<float> l(kToyVocab);
  while (static_cast<int>(out.size()) < max_tokens) {
    toy_logits(history, l);
    if (!allowed.empty())
      for (TokenId t = 0; t < kToyVocab; ++t)
        if (std::find(allowed.begin(), allowed.end(), t) == allowed.end()) l[t] = kNegInf;
    if (static_cast<int>(out.size()) < min_tokens) {
      std::vector<float> kept = l;
      for (TokenId s : stops) l[s] = kNegInf;
      if (std::all_of(l.begin(), l.end(), [](float v) { return v == kNegInf; })) l = kept;
    }
    const auto t = static_cast<TokenId>(std::max_element(l.begin(), l.end()) - l.begin());
    if (std::find(stops.begin(), stops.end(), t) != stops.end()) break;
    out.push_back(t);
    history.push_back(t);
  }
  return out;
}

// A prompt whose greedy output reaches, at index `k` >= 2, a token not seen before it:
// that token as a stop ends the request after k tokens.
struct EarlyStop {
  std::vector<TokenId> prompt;
  TokenId stop;
  int k;
};
EarlyStop early_stop(std::uint32_t seed) {
  EarlyStop e{random_prompt(seed, 9), 0, 2};
  const auto ref = toy_greedy(e.prompt, 40, kToyVocab);
  while (std::find(ref.begin(), ref.begin() + e.k, ref[e.k]) != ref.begin() + e.k) ++e.k;
  e.stop = ref[e.k];
  return e;
}

TEST(EngineMinTokens, MaskStopTokensLeavesARowWithOnlyStopsAlone) {
  std::vector<float> row = {1.0f, 2.0f, 3.0f, 0.5f};
  EXPECT_TRUE(mask_stop_tokens(row, std::vector<TokenId>{2, 2, 9}));
  EXPECT_EQ(row, (std::vector<float>{1.0f, 2.0f, kNegInf, 0.5f}));
  std::vector<float> only_stop = {kNegInf, 4.0f, kNegInf, kNegInf};
  EXPECT_FALSE(mask_stop_tokens(only_stop, std::vector<TokenId>{1, 1}));
  EXPECT_EQ(only_stop, (std::vector<float>{kNegInf, 4.0f, kNegInf, kNegInf}));
}

TEST(EngineMinTokens, StopTokensAndEosCannotEndBeforeMinTokens) {
  const EarlyStop e = early_stop(11);
  const int min_tokens = e.k + 6;
  const auto want = masked_greedy(e.prompt, 40, {e.stop}, min_tokens);
  ASSERT_GE(static_cast<int>(want.size()), min_tokens);
  for (const bool device : {false, true}) {
    ToyEngine eng(128, 4, small_config(), [&](ToyRunner &r) {
      r.mutable_config().eos_token_ids = {e.stop};
      r.device_sampling = device;
    });
    Collector c;
    auto by_stop_ids = greedy_request(1, e.prompt, 40);
    by_stop_ids.sampling.stop_token_ids = {e.stop};
    by_stop_ids.sampling.min_tokens = min_tokens;
    eng->submit(by_stop_ids, c.sink());
    auto by_eos = greedy_request(2, e.prompt, 40);
    by_eos.sampling.min_tokens = min_tokens;
    eng->submit(by_eos, c.sink());
    eng->submit(greedy_request(3, e.prompt, 40), c.sink());  // no min_tokens: ends at k
    auto over = greedy_request(4, e.prompt, 5);              // max_tokens still ends it first
    over.sampling.min_tokens = 30;
    eng->submit(over, c.sink());
    ASSERT_TRUE(c.wait_finished(4));
    for (std::uint64_t id : {1, 2}) {
      EXPECT_EQ(c.get(id).tokens, want) << "request " << id << ", device " << device;
      EXPECT_EQ(c.get(id).finish, want.size() < 40 ? FinishReason::kStop : FinishReason::kLength);
    }
    EXPECT_EQ(c.get(3).tokens.size(), static_cast<std::size_t>(e.k));
    EXPECT_EQ(c.get(3).finish, FinishReason::kStop);
    EXPECT_EQ(c.get(4).tokens, masked_greedy(e.prompt, 5, {e.stop}, 30));
    EXPECT_EQ(c.get(4).finish, FinishReason::kLength);
    if (device) {
      EXPECT_GT(eng.runner->sampled_forwards.load(), 0);  // after min_tokens
    }
  }
}

TEST(EngineMinTokens, NegativeMinTokensIsRefused) {
  ToyEngine eng(64, 4, small_config());
  Collector c;
  auto r = greedy_request(1, random_prompt(3, 5), 8);
  r.sampling.min_tokens = -1;
  eng->submit(r, c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).finish, FinishReason::kError);
  EXPECT_NE(c.get(1).error.find("min_tokens"), std::string::npos);
}

// Proposes the toy model's unmasked greedy continuation (which holds the stop token), or
// the stop token itself at every position.
class StopDrafter final : public Drafter {
 public:
  explicit StopDrafter(TokenId stop_everywhere) : stop_(stop_everywhere) {}
  const char *name() const override { return "stop"; }
  void propose(RequestId, std::span<const TokenId> tokens, std::int32_t k,
               std::vector<TokenId> &out) override {
    if (stop_ >= 0) {
      out.assign(k, stop_);
      return;
    }
    const auto g = toy_greedy(std::vector<TokenId>(tokens.begin(), tokens.end()), k, kToyVocab);
    out.insert(out.end(), g.begin(), g.end());
  }

 private:
  TokenId stop_;
};

TEST(EngineMinTokens, ADraftedStopBeforeMinTokensIsNotAccepted) {
  const EarlyStop e = early_stop(11);
  const int min_tokens = e.k + 6;
  const auto want = masked_greedy(e.prompt, 40, {e.stop}, min_tokens);
  for (const TokenId everywhere : {TokenId(-1), e.stop})
    for (const bool device : {false, true}) {
      EngineConfig cfg = small_config(128, 32, 16);
      cfg.speculative.num_speculative_tokens = 4;
      cfg.speculative.max_running = 0;
      cfg.speculative.adaptive = false;  // whenever allowed: these tests are about the step
      cfg.speculative.make_drafter = [everywhere] {
        return std::make_unique<StopDrafter>(everywhere);
      };
      ToyEngine eng(256, 4, cfg, [&](ToyRunner &r) { r.device_sampling = device; });
      Collector c;
      auto r = greedy_request(1, e.prompt, 40);
      r.sampling.stop_token_ids = {e.stop};
      r.sampling.min_tokens = min_tokens;
      eng->submit(r, c.sink());
      ASSERT_TRUE(c.wait_finished(1));
      EXPECT_EQ(c.get(1).tokens, want) << "drafter " << everywhere << ", device " << device;
      const EngineStatus s = eng->status();
      EXPECT_GT(s.spec_drafted, 0);
      if (everywhere < 0) {
        EXPECT_GT(s.spec_accepted, 0);
      }
      EXPECT_EQ(eng.runner->poisoned_rows.load(), 0);
    }
}

// Allows `token` `count` times, then `token` or kEnd (or only kEnd when `then_end_only`).
constexpr TokenId kEnd = 99;
class CountConstraint final : public OutputConstraint {
 public:
  CountConstraint(TokenId token, int count, bool then_end_only)
      : token_(token), count_(count), end_only_(then_end_only), words_((kToyVocab + 31) / 32) {}
  bool compute_mask(std::span<const TokenId>) override {
    std::fill(words_.begin(), words_.end(), 0u);
    auto allow = [&](TokenId t) { words_[t >> 5] |= 1u << (t & 31); };
    if (accepted_ < count_ || !end_only_) allow(token_);
    if (accepted_ >= count_) allow(kEnd);
    return true;
  }
  std::span<const std::uint32_t> mask_words() const override { return words_; }
  bool accept(TokenId t) override {
    const bool ok =
        t == token_ ? accepted_ < count_ || !end_only_ : t == kEnd && accepted_ >= count_;
    ++accepted_;
    return ok;
  }

 private:
  TokenId token_;
  int count_;
  bool end_only_;
  int accepted_ = 0;
  std::vector<std::uint32_t> words_;
};

TEST(EngineMinTokens, ComposesWithStructuredOutput) {
  for (const bool end_only : {true, false}) {
    EngineConfig cfg = small_config();
    cfg.make_constraint = [end_only](const SamplingParams &) -> std::unique_ptr<OutputConstraint> {
      return std::make_unique<CountConstraint>(7, 3, end_only);
    };
    ToyEngine eng(64, 4, cfg);
    Collector c;
    auto r = greedy_request(1, random_prompt(5, 6), 12);
    r.sampling.stop_token_ids = {kEnd};
    r.sampling.min_tokens = 8;
    r.sampling.constraint_kind = "regex";
    r.sampling.constraint_text = "7+";
    eng->submit(r, c.sink());
    ASSERT_TRUE(c.wait_finished(1));
    if (end_only) {
      // The document is complete and only its end is allowed: it ends, min_tokens or not.
      EXPECT_EQ(c.get(1).tokens, std::vector<TokenId>(3, 7));
      EXPECT_EQ(c.get(1).finish, FinishReason::kStop);
    } else {
      // Both masks apply: no end before 8 tokens, then the model's choice of the two.
      EXPECT_EQ(c.get(1).tokens, masked_greedy(random_prompt(5, 6), 12, {kEnd}, 8, {7, kEnd}));
      EXPECT_GE(c.get(1).tokens.size(), 8u);
      EXPECT_NE(c.get(1).finish, FinishReason::kError);
    }
  }
}

}  // namespace
}  // namespace keel::test
