// The engine driven in-process over the toy model: generation, batching invariance,
// prefix caching, stop conditions, logprobs and input validation.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>

#include "collector.h"
#include "engine_test_util.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

TEST(Engine, GreedyMatchesTheReferenceModel) {
  ToyEngine e(64, 4, small_config());
  Collector c;
  auto prompt = random_prompt(1, 23);
  e->submit(greedy_request(1, prompt, 12), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  const Collected r = c.get(1);
  EXPECT_EQ(r.finishes, 1);
  EXPECT_EQ(r.events_after_finish, 0);
  EXPECT_EQ(r.finish, FinishReason::kLength);
  EXPECT_EQ(r.tokens, toy_greedy(prompt, 12, kToyVocab));
  EXPECT_EQ(e.runner->poisoned_rows.load(), 0);
}

// The acceptance test: a request's greedy output is the same alone and beside 31
// others (different lengths, shared prefixes, chunked prefills, and — with a small
// KV pool — preemption and recompute).
TEST(Engine, GreedyOutputAloneEqualsBeside31Others) {
  auto shared = random_prompt(99, 40);
  auto make_prompt = [&](int i) {
    std::vector<TokenId> p;
    if (i % 3 == 0) p.assign(shared.begin(), shared.begin() + 8 + i % 29);  // shared prefixes
    auto tail = random_prompt(1000 + i, 5 + (i * 7) % 50);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  const int kMaxTokens = 20;
  std::vector<std::vector<TokenId>> alone(32);
  {
    ToyEngine e(256, 4, small_config());
    Collector c;
    for (int i = 0; i < 32; ++i) {
      e->submit(greedy_request(i + 1, make_prompt(i), kMaxTokens), c.sink());
      ASSERT_TRUE(c.wait_finished(i + 1));  // one at a time
      alone[i] = c.get(i + 1).tokens;
      ASSERT_EQ(alone[i], toy_greedy(make_prompt(i), kMaxTokens, kToyVocab)) << i;
    }
  }
  for (std::int32_t blocks : {512, 60}) {  // roomy, then tight enough to preempt
    ToyEngine e(blocks, 4, small_config(64, 32, 16));
    Collector c;
    for (int i = 0; i < 32; ++i)
      e->submit(greedy_request(i + 1, make_prompt(i), kMaxTokens), c.sink());
    ASSERT_TRUE(c.wait_finished(32));
    for (int i = 0; i < 32; ++i) {
      const Collected r = c.get(i + 1);
      EXPECT_EQ(r.finishes, 1);
      EXPECT_EQ(r.tokens, alone[i]) << "request " << i << " with " << blocks << " blocks";
    }
    EXPECT_EQ(e.runner->poisoned_rows.load(), 0);
    ASSERT_TRUE(eventually([&] { return e->status().kv_blocks_used == 0; }));
  }
}

TEST(Engine, PreemptionUnderPressureKeepsOutputsAndFreesEverything) {
  ToyEngine e(24, 4, small_config(64, 16, 8));  // 96 token slots for 16 requests
  Collector c;
  for (int i = 0; i < 16; ++i)
    e->submit(greedy_request(i + 1, random_prompt(50 + i, 10 + i), 30), c.sink());
  ASSERT_TRUE(c.wait_finished(16));
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(c.get(i + 1).tokens, toy_greedy(random_prompt(50 + i, 10 + i), 30, kToyVocab)) << i;
  ASSERT_TRUE(eventually([&] {
    auto s = e->status();
    return s.running == 0 && s.waiting == 0 && s.preempted == 0 && s.kv_blocks_used == 0;
  }));
}

TEST(Engine, PrefixCachingComputesFewerTokensWithEqualOutputs) {
  auto system = random_prompt(7, 64);
  auto prompt_of = [&](int i) {
    auto p = system;
    auto q = random_prompt(300 + i, 9);
    p.insert(p.end(), q.begin(), q.end());
    return p;
  };
  std::vector<std::vector<TokenId>> outputs[2];
  std::int64_t computed[2];
  EngineStatus final_status[2];
  for (int on = 0; on < 2; ++on) {
    ToyEngine e(256, 8, small_config(128, 8, 64, on == 1));
    Collector c;
    for (int i = 0; i < 6; ++i) {
      e->submit(greedy_request(i + 1, prompt_of(i), 5), c.sink());
      ASSERT_TRUE(c.wait_finished(i + 1));
      outputs[on].push_back(c.get(i + 1).tokens);
      if (on == 1 && i > 0) EXPECT_EQ(c.get(i + 1).cached_prompt_tokens, 64);
      if (on == 0) EXPECT_EQ(c.get(i + 1).cached_prompt_tokens, 0);
    }
    computed[on] = e.runner->computed_tokens.load();
    ASSERT_TRUE(
        eventually([&] { return e->status().steps > 0 && e->status().kv_blocks_used == 0; }));
    final_status[on] = e->status();
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  // Without the cache: 6 x (73 prompt + 4 decode). With it, five requests skip 64.
  EXPECT_EQ(computed[0], 6 * (73 + 4));
  EXPECT_EQ(computed[1], 6 * (73 + 4) - 5 * 64);
  EXPECT_EQ(final_status[1].prefix_hit_tokens, 5 * 64);
  EXPECT_EQ(final_status[0].prefix_hit_tokens, 0);
  EXPECT_GT(final_status[1].kv_blocks_cached, 0);
}

TEST(Engine, ExactRepeatComputesOnlyTheLastTokenViaCopyOnWrite) {
  ToyEngine e(64, 4, small_config());
  Collector c;
  auto prompt = random_prompt(5, 16);  // exactly 4 full blocks
  e->submit(greedy_request(1, prompt, 6), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  const std::int64_t first = e.runner->computed_tokens.load();
  EXPECT_EQ(first, 16 + 5);
  e->submit(greedy_request(2, prompt, 6), c.sink());
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(e.runner->computed_tokens.load() - first, 1 + 5);
  EXPECT_EQ(e.runner->toy_kv().copies.load(), 1);
  EXPECT_EQ(c.get(2).tokens, c.get(1).tokens);
  EXPECT_EQ(c.get(2).cached_prompt_tokens, 15);
  // The first request's cached blocks were not written by the second.
  e->submit(greedy_request(3, prompt, 6), c.sink());
  ASSERT_TRUE(c.wait_finished(3));
  EXPECT_EQ(c.get(3).tokens, c.get(1).tokens);
  EXPECT_EQ(e.runner->poisoned_rows.load(), 0);
}

TEST(Engine, StopTokenEndsWithStopAndIsNotEmitted) {
  auto prompt = random_prompt(11, 9);
  auto ref = toy_greedy(prompt, 10, kToyVocab);
  // The first position at which a token appears that did not appear before.
  std::size_t k = 3;
  while (std::find(ref.begin(), ref.begin() + k, ref[k]) != ref.begin() + k) ++k;
  ToyEngine e(64, 4, small_config());
  Collector c;
  auto req = greedy_request(1, prompt, 10);
  req.sampling.stop_token_ids = {ref[k]};
  e->submit(req, c.sink());
  // The model's eos ends a request too, unless ignore_eos.
  ToyEngine e2(64, 4, small_config(),
               [&](ToyRunner &r) { r.mutable_config().eos_token_ids = {ref[k]}; });
  e2->submit(greedy_request(2, prompt, 10), c.sink());
  auto ig = greedy_request(3, prompt, 10);
  ig.sampling.ignore_eos = true;
  e2->submit(ig, c.sink());
  ASSERT_TRUE(c.wait_finished(3));
  for (std::uint64_t id : {1, 2}) {
    const Collected r = c.get(id);
    EXPECT_EQ(r.finish, FinishReason::kStop);
    EXPECT_EQ(r.tokens, std::vector<TokenId>(ref.begin(), ref.begin() + k));
  }
  EXPECT_EQ(c.get(3).tokens, ref);
  EXPECT_EQ(c.get(3).finish, FinishReason::kLength);
}

TEST(Engine, MaxModelLenEndsWithLength) {
  EngineConfig cfg = small_config();
  cfg.max_model_len = 20;
  ToyEngine e(64, 4, cfg);
  Collector c;
  e->submit(greedy_request(1, random_prompt(3, 15), 100), c.sink());
  e->submit(greedy_request(2, random_prompt(3, 20), 100), c.sink());  // no room: error
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.get(1).tokens.size(), 5u);
  EXPECT_EQ(c.get(1).finish, FinishReason::kLength);
  EXPECT_EQ(c.get(2).finish, FinishReason::kError);
  EXPECT_NE(c.get(2).error.find("limit"), std::string::npos);
}

TEST(Engine, KvCapacityCapsTheModelLength) {
  ToyEngine e(8, 4, small_config());  // 32 token slots
  EXPECT_EQ(e->max_model_len(), 32);
  Collector c;
  e->submit(greedy_request(1, random_prompt(3, 30), 100), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).tokens.size(), 2u);
  EXPECT_EQ(c.get(1).finish, FinishReason::kLength);
}

TEST(Engine, InvalidRequestsFinishWithErrorNotACrash) {
  ToyEngine e(64, 4, small_config());
  Collector c;
  e->submit(greedy_request(1, {}, 5), c.sink());
  e->submit(greedy_request(2, {1, 2, kToyVocab}, 5), c.sink());
  e->submit(greedy_request(3, {1, -4}, 5), c.sink());
  e->submit(greedy_request(4, {1, 2}, -1), c.sink());
  auto bad_temp = greedy_request(5, {1, 2}, 5);
  bad_temp.sampling.temperature = -1.0f;
  e->submit(bad_temp, c.sink());
  auto late = greedy_request(6, {1, 2}, 5);
  late.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  e->submit(late, c.sink());
  e->submit(greedy_request(7, {1, 2}, 0), c.sink());  // nothing asked: finishes at once
  ASSERT_TRUE(c.wait_finished(7));
  for (std::uint64_t id = 1; id <= 6; ++id) {
    EXPECT_EQ(c.get(id).finish, FinishReason::kError) << id;
    EXPECT_FALSE(c.get(id).error.empty()) << id;
  }
  EXPECT_EQ(c.get(7).finish, FinishReason::kLength);
  EXPECT_TRUE(c.get(7).tokens.empty());
  // A duplicate of a live id is rejected; the original is unaffected.
  e->submit(greedy_request(8, random_prompt(1, 10), 2000), c.sink());
  e->submit(greedy_request(8, random_prompt(2, 10), 5), c.sink());
  ASSERT_TRUE(c.wait_finished(8));
  e->abort(RequestId{8});
  ASSERT_TRUE(c.wait_finished(9));
  EXPECT_EQ(c.get(8).finishes, 2);
  EXPECT_TRUE(eventually([&] {
    auto s = e->status();
    return s.running + s.waiting == 0 && s.kv_blocks_used == 0;
  }));
}

TEST(Engine, LogprobsAndPromptLogprobsMatchTheModel) {
  ToyEngine e(64, 4, small_config(64, 8, 8));
  Collector c;
  auto prompt = random_prompt(21, 19);
  auto req = greedy_request(1, prompt, 4);
  req.sampling.logprobs = 3;
  req.sampling.prompt_logprobs = true;
  e->submit(req, c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  const Collected r = c.get(1);
  auto log_softmax_at = [](std::span<const TokenId> history, TokenId t) {
    std::vector<float> l(kToyVocab);
    toy_logits(history, l);
    double mx = *std::max_element(l.begin(), l.end()), s = 0;
    for (float v : l) s += std::exp(v - mx);
    return static_cast<float>(l[t] - mx - std::log(s));
  };
  ASSERT_EQ(r.prompt_logprobs.size(), prompt.size());
  EXPECT_FALSE(r.prompt_logprobs[0].has_value());
  for (std::size_t i = 1; i < prompt.size(); ++i) {
    ASSERT_TRUE(r.prompt_logprobs[i].has_value()) << i;
    EXPECT_EQ(r.prompt_logprobs[i]->token, prompt[i]);
    EXPECT_NEAR(r.prompt_logprobs[i]->logprob,
                log_softmax_at(std::span(prompt).first(i), prompt[i]), 1e-4);
  }
  ASSERT_EQ(r.sampled_logprobs.size(), 4u);
  ASSERT_EQ(r.top_logprobs.size(), 4u);
  auto history = prompt;
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(r.sampled_logprobs[i].token, r.tokens[i]);
    EXPECT_NEAR(r.sampled_logprobs[i].logprob, log_softmax_at(history, r.tokens[i]), 1e-4);
    ASSERT_EQ(r.top_logprobs[i].size(), 3u);
    EXPECT_EQ(r.top_logprobs[i][0].token, r.tokens[i]);  // greedy picks the best
    history.push_back(r.tokens[i]);
  }
  // max_tokens 0 with prompt logprobs: scores the prompt, generates nothing.
  auto echo = greedy_request(2, prompt, 0);
  echo.sampling.prompt_logprobs = true;
  e->submit(echo, c.sink());
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.get(2).finish, FinishReason::kLength);
  EXPECT_TRUE(c.get(2).tokens.empty());
  ASSERT_EQ(c.get(2).prompt_logprobs.size(), prompt.size());
  EXPECT_EQ(c.get(2).prompt_logprobs[5]->logprob, r.prompt_logprobs[5]->logprob);
}

TEST(Engine, SeededSamplingIsReproducible) {
  ToyEngine e(64, 4, small_config());
  Collector c;
  for (std::uint64_t id : {1, 2}) {
    auto req = greedy_request(id, random_prompt(8, 12), 16);
    req.sampling.temperature = 1.0f;
    req.sampling.seed = 1234;
    e->submit(req, c.sink());
  }
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.get(1).tokens, c.get(2).tokens);
  EXPECT_EQ(c.get(1).tokens.size(), 16u);
}

TEST(Engine, StatusCountsStepsAndTokens) {
  ToyEngine e(64, 4, small_config());
  Collector c;
  e->submit(greedy_request(1, random_prompt(4, 10), 5), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  // The blocks are free as soon as the request finishes (inside its last step); the
  // step's counters land when that step ends.
  ASSERT_TRUE(eventually([&] {
    const auto st = e->status();
    return st.kv_blocks_used == 0 && st.step_in_progress_seconds == 0.0;
  }));
  auto s = e->status();
  EXPECT_EQ(s.prompt_tokens, 10);
  EXPECT_EQ(s.prefill_tokens, 10);
  EXPECT_EQ(s.decode_tokens, 4);
  EXPECT_EQ(s.steps, 5u);
  EXPECT_EQ(s.kv_blocks_total, 64);
  EXPECT_EQ(s.kv_blocks_cached, 3);  // 14 computed tokens: 3 full blocks
  EXPECT_GT(s.last_step_seconds, 0.0);
  EXPECT_EQ(s.step_in_progress_seconds, 0.0);
  EXPECT_LT(s.heartbeat_age_seconds, 5.0);
}

}  // namespace
}  // namespace keel::test
