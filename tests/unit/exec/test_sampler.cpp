#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "exec/sampler.h"

namespace keel {
namespace {

std::vector<float> logits_a() { return {1.0f, 3.0f, 2.0f, -1.0f, 2.5f}; }

TEST(Sampler, GreedyPicksArgmaxWithLogprobs) {
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 3;
  Sampler s(p, 1);
  auto l = logits_a();
  auto r = s.sample(l, {}, {});
  EXPECT_EQ(r.token, 1);
  double lse = 0;
  for (float v : l) lse += std::exp(v);
  lse = std::log(lse);
  EXPECT_NEAR(r.logprob, 3.0 - lse, 1e-6);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 4);
  EXPECT_EQ(r.top[2].token, 2);
  EXPECT_NEAR(r.top[1].logprob, 2.5 - lse, 1e-6);
}

TEST(Sampler, SameSeedSameOutput) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = std::sin(i * 0.7f);
  std::vector<TokenId> a, b, c;
  Sampler s1(p, 0), s2(p, 999);
  for (int i = 0; i < 30; ++i)
    a.push_back(s1.sample(l, {}, {}).token), b.push_back(s2.sample(l, {}, {}).token);
  EXPECT_EQ(a, b);
  p.seed = 4321;
  Sampler s3(p, 0);
  for (int i = 0; i < 30; ++i) c.push_back(s3.sample(l, {}, {}).token);
  EXPECT_NE(a, c);
}

// Device sampling takes the draw from draw_uniform() and samples elsewhere with it: the
// split must choose exactly what sample() chooses, step after step, and greedy must
// neither draw nor depend on the draw.
TEST(Sampler, DrawThenSampleWithEqualsSample) {
  std::vector<float> l(200);
  for (int i = 0; i < 200; ++i) l[i] = 2.0f * std::sin(i * 0.37f) + 0.01f * i;
  const std::vector<TokenId> prompt = {3, 9, 9, 150};
  for (int variant = 0; variant < 4; ++variant) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.seed = 77 + variant;
    if (variant == 1) p.top_k = 12;
    if (variant == 2) p.top_p = 0.8f, p.min_p = 0.02f;
    if (variant == 3) p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f;
    Sampler whole(p, 0), split(p, 0);
    std::vector<TokenId> generated, a, b;
    for (int step = 0; step < 40; ++step) {
      const auto r1 = whole.sample(l, prompt, generated);
      const double u = split.draw_uniform();
      ASSERT_GE(u, 0.0);
      ASSERT_LT(u, 1.0);
      const auto r2 = split.sample_with(l, prompt, generated, u);
      a.push_back(r1.token);
      b.push_back(r2.token);
      EXPECT_EQ(r1.logprob, r2.logprob);
      generated.push_back(r1.token);
    }
    EXPECT_EQ(a, b) << "variant " << variant;
    EXPECT_GT(std::set<TokenId>(a.begin(), a.end()).size(), 3u) << "variant " << variant;
  }
  SamplingParams g;
  g.temperature = 0;
  Sampler greedy(g, 5);
  EXPECT_EQ(greedy.draw_uniform(), 0.0);
  EXPECT_EQ(greedy.sample_with(l, {}, {}, 0.99).token, greedy.sample(l, {}, {}).token);
}

TEST(Sampler, TopKAndTopPAndMinPRestrictTheSupport) {
  std::vector<float> l = {5.0f, 4.9f, 1.0f, 0.5f, 0.0f};
  auto support = [&](SamplingParams p) {
    std::map<TokenId, int> seen;
    Sampler s(p, 42);
    for (int i = 0; i < 400; ++i) seen[s.sample(l, {}, {}).token]++;
    return seen;
  };
  SamplingParams p;
  p.top_k = 2;
  auto k = support(p);
  EXPECT_EQ(k.size(), 2u);
  EXPECT_TRUE(k.count(0) && k.count(1));
  p.top_k = 0;
  p.top_p = 0.5f;  // token 0 alone has ~0.5: keeps 0 or {0, 1}
  auto tp = support(p);
  EXPECT_LE(tp.size(), 2u);
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // p(2) / p(0) = e^-4 < 0.5
  auto mp = support(p);
  EXPECT_EQ(mp.size(), 2u);
  p.min_p = 0;
  auto all = support(p);
  EXPECT_GE(all.size(), 3u);
}

TEST(Sampler, Penalties) {
  std::vector<float> l = {2.0f, 1.9f, -1.0f};
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  std::vector<TokenId> prompt = {0};
  EXPECT_EQ(Sampler(p, 0).sample(l, prompt, {}).token, 1);  // 2.0 / 2 = 1.0 < 1.9
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.05f;
  std::vector<TokenId> gen = {0};
  EXPECT_EQ(Sampler(p, 0).sample(l, {}, gen).token, 0);  // 1.95 > 1.9
  p.frequency_penalty = 0.1f;
  gen = {0, 0};
  EXPECT_EQ(Sampler(p, 0).sample(l, {}, gen).token, 1);  // 2 - 0.05 - 0.2 < 1.9
  // Logprobs, when asked, stay those of the raw logits.
  p.logprobs = 0;
  auto r = Sampler(p, 0).sample(l, {}, gen);
  EXPECT_NEAR(r.logprob, logprobs_of(l, 1, 0).logprob, 1e-7);
}

TEST(Sampler, StopTokens) {
  SamplingParams p;
  p.stop_token_ids = {7};
  Sampler s(p, 0);
  std::vector<TokenId> eos = {2};
  EXPECT_TRUE(s.is_stop_token(7, eos));
  EXPECT_TRUE(s.is_stop_token(2, eos));
  EXPECT_FALSE(s.is_stop_token(3, eos));
  p.ignore_eos = true;
  Sampler s2(p, 0);
  EXPECT_FALSE(s2.is_stop_token(2, eos));
}

TEST(Sampler, RejectsBadParams) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_ANY_THROW(Sampler(p, 0));
  p.top_p = 1;
  p.temperature = -1;
  EXPECT_ANY_THROW(Sampler(p, 0));
}

}  // namespace
}  // namespace keel
