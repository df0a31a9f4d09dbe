// Speculative decoding in the engine (issue 30): drafts verified in one forward over
// 1 + k positions (SequenceSlice::kTail), a prefix accepted, the KV of the rest rolled
// back. Over the toy runner, whose logits hash the token history read back through the
// block tables (a stale or misplaced KV slot poisons the row), greedy output with drafts
// is the output without them, alone, beside 31 others, under preemption and with the
// prefix cache warm; at temperature > 0 the token distribution is the target's.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include "collector.h"
#include "engine/engine.h"
#include "engine/ngram_drafter.h"
#include "engine_test_util.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

// Proposes the toy model's greedy continuation, wrong from a position that varies with
// the history (sometimes all right, sometimes the first draft wrong), or always wrong.
class OracleDrafter final : public Drafter {
 public:
  explicit OracleDrafter(bool always_wrong = false) : always_wrong_(always_wrong) {}
  const char *name() const override { return "oracle"; }
  void propose(RequestId, std::span<const TokenId> tokens, std::int32_t max_tokens,
               std::vector<TokenId> &out) override {
    std::vector<TokenId> greedy =
        toy_greedy(std::vector<TokenId>(tokens.begin(), tokens.end()), max_tokens, kToyVocab);
    const auto wrong_at =
        always_wrong_ ? 0 : static_cast<std::int32_t>(history_hash(tokens) % (max_tokens + 2));
    for (std::int32_t j = wrong_at; j < max_tokens; ++j) greedy[j] = (greedy[j] + 1) % kToyVocab;
    out.insert(out.end(), greedy.begin(), greedy.end());
  }

 private:
  bool always_wrong_;
};

EngineConfig spec_config(std::int32_t k = 4, bool always_wrong = false, bool caching = true) {
  EngineConfig cfg = small_config(128, 32, 16, caching);
  cfg.speculative.num_speculative_tokens = k;
  cfg.speculative.max_running = 0;   // draft at any batch size
  cfg.speculative.adaptive = false;  // whenever allowed: these tests are about the step
  cfg.speculative.make_drafter = [always_wrong] {
    return std::make_unique<OracleDrafter>(always_wrong);
  };
  return cfg;
}

std::vector<TokenId> prompt_of(int i) {
  std::vector<TokenId> p = random_prompt(7, 24);  // a shared prefix for every fourth
  if (i % 4 != 0) p.clear();
  auto tail = random_prompt(100 + i, 3 + (i * 11) % 37);
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

TEST(EngineSpeculative, GreedyOutputIsTheSameBeside31AndUnderPreemption) {
  const int kTokens = 23;
  for (const std::int32_t blocks : {512, 60}) {  // 60 blocks of 4: preemptions
    ToyEngine e(blocks, 4, spec_config());
    for (int round = 0; round < 2; ++round) {  // the second with the prefix cache warm
      Collector c;
      for (int i = 0; i < 32; ++i)
        e->submit(greedy_request(i + 1, prompt_of(i), kTokens), c.sink());
      ASSERT_TRUE(c.wait_finished(32, std::chrono::seconds(60)));
      for (int i = 0; i < 32; ++i) {
        EXPECT_EQ(c.get(i + 1).tokens, toy_greedy(prompt_of(i), kTokens, kToyVocab))
            << "request " << i << ", " << blocks << " blocks, round " << round;
        EXPECT_EQ(c.get(i + 1).finish, FinishReason::kLength);
      }
    }
    EXPECT_EQ(e.runner->poisoned_rows.load(), 0);
    EXPECT_GT(e.runner->verify_slices.load(), 0);
    ASSERT_TRUE(eventually([&] { return e->status().kv_blocks_used == 0; }));
    const EngineStatus s = e->status();
    EXPECT_EQ(s.spec_method, "oracle");
    EXPECT_GT(s.spec_accepted, 0);
    EXPECT_LT(s.spec_accepted, s.spec_drafted);  // some rejected, so some rolled back
    EXPECT_EQ(s.spec_accepted_at.size(), 4u);
    EXPECT_GE(s.spec_accepted_at[0], s.spec_accepted_at[3]);
  }
}

TEST(EngineSpeculative, MaxTokensStopTokensAndLogprobsAreExact) {
  const auto prompt = random_prompt(5, 11);
  const auto greedy = toy_greedy(prompt, 40, kToyVocab);
  // The first token not seen before index 9 stops the request there.
  std::size_t stop_at = 9;
  while (std::find(greedy.begin(), greedy.begin() + stop_at, greedy[stop_at]) !=
         greedy.begin() + stop_at)
    ++stop_at;
  std::map<bool, Collected> runs;
  for (const bool spec : {false, true}) {
    ToyEngine e(256, 4, spec ? spec_config(5) : small_config());
    Collector c;
    for (int max_tokens = 1; max_tokens <= 9; ++max_tokens)
      e->submit(greedy_request(max_tokens, prompt, max_tokens), c.sink());
    auto stopped = greedy_request(100, prompt, 40);
    stopped.sampling.stop_token_ids = {greedy[stop_at]};
    e->submit(stopped, c.sink());
    auto lp = greedy_request(101, prompt, 30);
    lp.sampling.logprobs = 3;
    e->submit(lp, c.sink());
    ASSERT_TRUE(c.wait_finished(11));
    for (int max_tokens = 1; max_tokens <= 9; ++max_tokens)
      EXPECT_EQ(c.get(max_tokens).tokens,
                std::vector<TokenId>(greedy.begin(), greedy.begin() + max_tokens));
    EXPECT_EQ(c.get(100).tokens, std::vector<TokenId>(greedy.begin(), greedy.begin() + stop_at));
    EXPECT_EQ(c.get(100).finish, FinishReason::kStop);
    runs[spec] = c.get(101);
    if (spec) EXPECT_GT(e->status().spec_accepted, 0);
  }
  ASSERT_EQ(runs[true].tokens, runs[false].tokens);
  ASSERT_EQ(runs[true].sampled_logprobs.size(), 30u);
  for (std::size_t i = 0; i < 30; ++i) {
    EXPECT_EQ(runs[true].sampled_logprobs[i].token, runs[false].sampled_logprobs[i].token);
    EXPECT_FLOAT_EQ(runs[true].sampled_logprobs[i].logprob,
                    runs[false].sampled_logprobs[i].logprob);
    ASSERT_EQ(runs[true].top_logprobs[i].size(), 3u);
    EXPECT_EQ(runs[true].top_logprobs[i][0].token, runs[false].top_logprobs[i][0].token);
  }
}

TEST(EngineSpeculative, DeviceSampledGreedyRowsVerifyToo) {
  ToyEngine e(256, 4, spec_config(), [](ToyRunner &r) { r.device_sampling = true; });
  Collector c;
  for (int i = 0; i < 8; ++i) e->submit(greedy_request(i + 1, prompt_of(i), 20), c.sink());
  ASSERT_TRUE(c.wait_finished(8));
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(c.get(i + 1).tokens, toy_greedy(prompt_of(i), 20, kToyVocab)) << i;
  EXPECT_GT(e.runner->sampled_forwards.load(), 0);
  EXPECT_GT(e->status().spec_accepted, 0);
}

// A runner with a cap on logits rows a forward (the CUDA runner's max_logits_rows) gets
// no more drafts than the running sequences leave room for.
TEST(EngineSpeculative, DraftsFitTheRunnersLogitsRows) {
  ToyEngine e(512, 4, spec_config(4), [](ToyRunner &r) { r.max_rows = 11; });
  Collector c;
  for (int i = 0; i < 8; ++i) e->submit(greedy_request(i + 1, prompt_of(i), 20), c.sink());
  ASSERT_TRUE(c.wait_finished(8));
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(c.get(i + 1).tokens, toy_greedy(prompt_of(i), 20, kToyVocab)) << i;
  EXPECT_LE(e.runner->most_rows.load(), 11);
  EXPECT_GT(e->status().spec_drafted, 0);
}

TEST(EngineSpeculative, OptOutAndRunnersThatCannotVerifyNeverDraft) {
  {
    ToyEngine e(256, 4, spec_config());
    Collector c;
    auto r = greedy_request(1, prompt_of(1), 20);
    r.sampling.speculative = false;
    e->submit(r, c.sink());
    ASSERT_TRUE(c.wait_finished(1));
    EXPECT_EQ(c.get(1).tokens, toy_greedy(prompt_of(1), 20, kToyVocab));
    EXPECT_EQ(e.runner->verify_slices.load(), 0);
  }
  ToyEngine e(256, 4, spec_config(), [](ToyRunner &r) { r.verify = false; });
  Collector c;
  e->submit(greedy_request(1, prompt_of(1), 20), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).tokens, toy_greedy(prompt_of(1), 20, kToyVocab));
  EXPECT_EQ(e.runner->verify_slices.load(), 0);
  EXPECT_EQ(e->status().spec_method, "");
}

// Drafts that are always wrong cost a wider step each: the tracker pauses drafting.
TEST(EngineSpeculative, LowAcceptanceBacksOff) {
  ToyEngine e(256, 4, spec_config(4, /*always_wrong=*/true));
  Collector c;
  e->submit(greedy_request(1, prompt_of(1), 200), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).tokens, toy_greedy(prompt_of(1), 200, kToyVocab));
  const EngineStatus s = e->status();
  EXPECT_EQ(s.spec_accepted, 0);
  EXPECT_GT(s.spec_steps, 0);
  EXPECT_LT(s.spec_steps, 40);  // of ~200 decode steps
}

// A drafter that takes 3 ms to propose k drafts of which the first two are right (so the
// acceptance tracker keeps drafting): with SpeculativeConfig::adaptive (the default) the
// engine measures a verify step slower a token than a plain one and stops drafting
// (EngineStatus::spec_paused, its speed-up below 1); without it, drafts go on.
class SlowDrafter final : public Drafter {
 public:
  const char *name() const override { return "slow"; }
  void propose(RequestId, std::span<const TokenId> tokens, std::int32_t k,
               std::vector<TokenId> &out) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    auto g = toy_greedy(std::vector<TokenId>(tokens.begin(), tokens.end()), k, kToyVocab);
    for (std::int32_t j = 2; j < k; ++j) g[j] = (g[j] + 1) % kToyVocab;
    out.insert(out.end(), g.begin(), g.end());
  }
};

TEST(EngineSpeculative, AdaptiveDraftingStopsWhereItMeasuresSlower) {
  for (const bool adaptive : {true, false}) {
    EngineConfig cfg = spec_config();
    cfg.speculative.adaptive = adaptive;
    cfg.speculative.make_drafter = [] { return std::make_unique<SlowDrafter>(); };
    ToyEngine e(256, 4, cfg);
    Collector c;
    e->submit(greedy_request(1, prompt_of(1), 150), c.sink());
    ASSERT_TRUE(c.wait_finished(1));
    EXPECT_EQ(c.get(1).tokens, toy_greedy(prompt_of(1), 150, kToyVocab));
    const EngineStatus s = e->status();
    EXPECT_GT(s.spec_accepted, 0);
    if (adaptive) {
      // 16 verify steps measured (3 tokens each), 16 plain ones, then none: the first
      // probe comes 256 steps later.
      EXPECT_EQ(s.spec_steps, 16);
      EXPECT_TRUE(s.spec_paused);
      EXPECT_GT(s.spec_speedup, 0.0);
      EXPECT_LT(s.spec_speedup, 1.0);
    } else {
      EXPECT_GT(s.spec_steps, 30);  // drafting all along
      EXPECT_FALSE(s.spec_paused);
      EXPECT_EQ(s.spec_speedup, 0.0);
    }
  }
}

// Allows only `token`, `count` times, then only kEnd; counts the masks it computes.
constexpr TokenId kEnd = 99;
class RepeatConstraint final : public OutputConstraint {
 public:
  RepeatConstraint(TokenId token, int count, std::atomic<int> *masks)
      : token_(token), count_(count), masks_(masks), words_((kToyVocab + 31) / 32) {}
  bool compute_mask(std::span<const TokenId>) override {
    ++*masks_;
    const TokenId allowed = accepted_ < count_ ? token_ : kEnd;
    std::fill(words_.begin(), words_.end(), 0u);
    words_[allowed >> 5] |= 1u << (allowed & 31);
    return true;
  }
  std::span<const std::uint32_t> mask_words() const override { return words_; }
  bool accept(TokenId t) override { return t == (accepted_++ < count_ ? token_ : kEnd); }

 private:
  TokenId token_;
  int count_;
  std::atomic<int> *masks_;
  int accepted_ = 0;
  std::vector<std::uint32_t> words_;
};

class FixedDrafter final : public Drafter {
 public:
  explicit FixedDrafter(TokenId t) : t_(t) {}
  const char *name() const override { return "fixed"; }
  void propose(RequestId, std::span<const TokenId>, std::int32_t k,
               std::vector<TokenId> &out) override {
    out.assign(k, t_);
  }

 private:
  TokenId t_;
};

TEST(EngineSpeculative, StructuredOutputMasksEveryDraftedPosition) {
  for (const TokenId drafted : {TokenId(7), TokenId(8)}) {  // right, then always wrong
    std::atomic<int> masks{0};
    EngineConfig cfg = spec_config();
    cfg.speculative.make_drafter = [drafted] { return std::make_unique<FixedDrafter>(drafted); };
    cfg.make_constraint = [&masks](const SamplingParams &) -> std::unique_ptr<OutputConstraint> {
      return std::make_unique<RepeatConstraint>(7, 11, &masks);
    };
    ToyEngine e(256, 4, cfg);
    Collector c;
    for (const float temperature : {0.0f, 1.0f}) {
      auto r = greedy_request(temperature > 0 ? 2 : 1, random_prompt(3, 9), 30);
      r.sampling.temperature = temperature;
      r.sampling.stop_token_ids = {kEnd};
      r.sampling.constraint_kind = "regex";
      r.sampling.constraint_text = "7{11}";
      e->submit(r, c.sink());
    }
    ASSERT_TRUE(c.wait_finished(2));
    for (int id : {1, 2}) {
      EXPECT_EQ(c.get(id).tokens, std::vector<TokenId>(11, 7)) << drafted;
      EXPECT_EQ(c.get(id).finish, FinishReason::kStop);
    }
    EXPECT_EQ(masks.load(), 24);  // one per emitted position, the stop's included
    if (drafted == 7) EXPECT_GT(e->status().spec_accepted, 0);
    EXPECT_EQ(e.runner->poisoned_rows.load(), 0);
  }
}

// Two-sample chi-square on token histograms, bins with fewer than 10 in both merged;
// true when the samples are consistent at p = 0.001 (Wilson-Hilferty quantile).
bool same_distribution(const std::map<TokenId, int> &a, const std::map<TokenId, int> &b,
                       double *stat_out) {
  std::map<TokenId, int> all;
  for (auto &[t, n] : a) all[t] += n;
  for (auto &[t, n] : b) all[t] += n;
  double na = 0, nb = 0;
  for (auto &[t, n] : a) na += n;
  for (auto &[t, n] : b) nb += n;
  std::vector<std::pair<double, double>> bins;
  double rest_a = 0, rest_b = 0;
  for (auto &[t, n] : all) {
    const double x = a.count(t) ? a.at(t) : 0, y = b.count(t) ? b.at(t) : 0;
    if (x + y < 20) {
      rest_a += x;
      rest_b += y;
    } else {
      bins.push_back({x, y});
    }
  }
  if (rest_a + rest_b > 0) bins.push_back({rest_a, rest_b});
  double stat = 0;
  for (auto [x, y] : bins) {
    const double ex = (x + y) * na / (na + nb), ey = (x + y) * nb / (na + nb);
    stat += (x - ex) * (x - ex) / ex + (y - ey) * (y - ey) / ey;
  }
  const double df = static_cast<double>(bins.size()) - 1, z = 3.09;
  const double crit = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  *stat_out = stat;
  return stat < crit;
}

// At temperature > 0 the accepted drafts and the tokens sampled in their place have the
// target's distribution: the histograms of the 2nd..5th tokens over 3,000 seeds cannot
// be told apart from those without drafts (chi-square), and a biased one can.
TEST(EngineSpeculative, SampledDistributionIsTheTargets) {
  const int kSeeds = 3000, kTokens = 5;
  const auto prompt = random_prompt(11, 6);
  std::vector<std::vector<TokenId>> outputs[2];
  auto run = [&](const EngineConfig &cfg, std::int64_t *accepted) {
    std::vector<std::map<TokenId, int>> hist(kTokens);
    auto &outs = outputs[accepted != nullptr];
    ToyEngine e(2048, 4, cfg);
    Collector c;
    for (int i = 0; i < kSeeds; ++i) {
      auto r = greedy_request(i + 1, prompt, kTokens);
      r.sampling.temperature = 0.08f;  // toy logits span 1: peaked, but not one token
      r.sampling.seed = 1000 + i;
      e->submit(r, c.sink());
    }
    EXPECT_TRUE(c.wait_finished(kSeeds, std::chrono::seconds(120)));
    for (int i = 0; i < kSeeds; ++i) {
      const auto &t = c.get(i + 1).tokens;
      EXPECT_EQ(t.size(), static_cast<std::size_t>(kTokens));
      for (int j = 0; j < kTokens && j < static_cast<int>(t.size()); ++j) ++hist[j][t[j]];
      outs.push_back(t);
    }
    if (accepted) *accepted = e->status().spec_accepted;
    return hist;
  };
  EngineConfig off = small_config(512, 64, 16);
  EngineConfig on = spec_config(3);
  on.scheduler = off.scheduler;
  std::int64_t accepted = 0;
  const auto base = run(off, nullptr);
  const auto spec = run(on, &accepted);
  EXPECT_GT(accepted, kSeeds / 2);
  for (int j = 1; j < kTokens; ++j) {
    double stat = 0;
    EXPECT_TRUE(same_distribution(base[j], spec[j], &stat)) << "token " << j << " chi2 " << stat;
  }
  // Sampled on the host, each verified row draws the request's next uniform exactly as
  // the step without drafts would: with a seed, the very same tokens.
  EXPECT_EQ(outputs[0], outputs[1]);
  // The comparison can fail: a quarter more of one token is told apart.
  std::map<TokenId, int> biased = base[2];
  biased[toy_greedy(prompt, 3, kToyVocab)[2]] += kSeeds / 4;
  double stat = 0;
  EXPECT_FALSE(same_distribution(base[2], biased, &stat)) << stat;
}

TEST(NgramDrafter, ProposesWhatFollowedTheLatestMatch) {
  NgramDrafter d(3, 2);
  std::vector<TokenId> out;
  // ... 5 6 7 8 9 ... 5 6 7 8 1 ... 6 7  ->  8 1 (the latest "6 7" within n = 3: "x 6 7")
  const std::vector<TokenId> seq{1, 5, 6, 7, 8, 9, 2, 5, 6, 7, 8, 1, 3, 4, 6, 7};
  d.propose(RequestId{1}, seq, 4, out);
  EXPECT_EQ(out, (std::vector<TokenId>{8, 1, 3, 4}));
  out.clear();
  d.propose(RequestId{1}, std::vector<TokenId>{4, 5, 6, 7, 5, 6}, 1, out);
  EXPECT_EQ(out, (std::vector<TokenId>{7}));
  out.clear();
  d.propose(RequestId{1}, std::vector<TokenId>{1, 2, 3, 4}, 4, out);  // no match
  EXPECT_TRUE(out.empty());
  out.clear();
  d.propose(RequestId{1}, std::vector<TokenId>{9, 9, 9}, 4, out);  // overlapping: "9 9" at 0
  EXPECT_EQ(out, (std::vector<TokenId>{9}));
}

TEST(Speculative, MethodNamesAndLimits) {
  EXPECT_EQ(parse_speculative_method("ngram"), "ngram");
  EXPECT_EQ(parse_speculative_method("off"), "");
  EXPECT_THROW(parse_speculative_method("eagle9"), Error);
  SpeculativeConfig c;
  EXPECT_EQ(make_drafter(c), nullptr);
  c.method = "ngram";
  EXPECT_STREQ(make_drafter(c)->name(), "ngram");
  c.num_speculative_tokens = 17;
  EXPECT_THROW(make_drafter(c), Error);
}

TEST(Speculative, AcceptanceTrackerPausesAndRecovers) {
  AcceptanceTracker t;
  int drafted_steps = 0;
  for (int i = 0; i < 100; ++i)
    if (t.should_draft()) {
      ++drafted_steps;
      t.record(4, 0);
    }
  EXPECT_LT(drafted_steps, 20);
  AcceptanceTracker good;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(good.should_draft());
    good.record(4, 2);
  }
}

}  // namespace
}  // namespace keel::test
