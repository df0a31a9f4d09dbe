// The engine's device-sampling route (ModelRunner::forward_sample): a runner that
// samples where its logits are must give every request the tokens the host Sampler
// gives, seeded or not; steps whose rows need logits (top-N or prompt logprobs) still
// sample on the host; a broken device sampler fails its requests, not the engine.
// The toy runner stands in for the GPU (tests/cuda/sample_test.cpp checks the CUDA
// kernels against the host Sampler on the H200).
#include <gtest/gtest.h>

#include "collector.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

// Mixed traffic: seeded samplers with every knob, greedy rows, sampled logprobs, chunked
// prefills beside decodes (budget 64, chunks of 16).
std::vector<GenerationRequest> mixed_requests() {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 12; ++i) {
    auto r = greedy_request(i + 1, random_prompt(300 + i, 6 + (i * 11) % 40), 14);
    if (i % 4 != 3) {
      r.sampling.temperature = 0.7f + 0.1f * (i % 3);
      r.sampling.seed = 1000 + i;
      if (i % 2 == 0) r.sampling.top_k = 20;
      if (i % 3 == 0) r.sampling.top_p = 0.9f;
      if (i % 5 == 0) r.sampling.min_p = 0.05f;
      if (i % 3 == 1) r.sampling.repetition_penalty = 1.15f;
      if (i % 4 == 1) {
        r.sampling.presence_penalty = 0.3f;
        r.sampling.frequency_penalty = 0.2f;
      }
    }
    if (i % 2 == 1) r.sampling.logprobs = 0;  // the sampled token's logprob only
    reqs.push_back(r);
  }
  return reqs;
}

std::vector<Collected> run(const std::vector<GenerationRequest> &reqs, bool device,
                           std::int64_t *host_steps = nullptr,
                           std::int64_t *device_steps = nullptr) {
  ToyEngine e(256, 4, small_config(64, 32, 16),
              [device](ToyRunner &r) { r.device_sampling = device; });
  Collector c;
  for (const auto &r : reqs) e->submit(r, c.sink());
  EXPECT_TRUE(c.wait_finished(static_cast<int>(reqs.size())));  // a count, not an id
  std::vector<Collected> out;
  for (const auto &r : reqs) out.push_back(c.get(r.id.value));
  if (host_steps) *host_steps = e.runner->forwards.load();
  if (device_steps) *device_steps = e.runner->sampled_forwards.load();
  return out;
}

TEST(EngineDeviceSampling, GivesEveryRequestTheHostSamplersTokens) {
  const auto reqs = mixed_requests();
  std::int64_t host_steps = 0, device_steps = 0;
  const auto host = run(reqs, false, &host_steps, &device_steps);
  EXPECT_GT(host_steps, 0);
  EXPECT_EQ(device_steps, 0);
  const auto dev = run(reqs, true, &host_steps, &device_steps);
  EXPECT_EQ(host_steps, 0);  // no step needed logits on the host
  EXPECT_GT(device_steps, 0);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(dev[i].finish, FinishReason::kLength) << i << " " << dev[i].error;
    EXPECT_EQ(dev[i].tokens.size(), 14u) << i;
    EXPECT_EQ(dev[i].tokens, host[i].tokens) << "request " << i;
    ASSERT_EQ(dev[i].sampled_logprobs.size(), host[i].sampled_logprobs.size()) << i;
    for (std::size_t k = 0; k < dev[i].sampled_logprobs.size(); ++k) {
      EXPECT_EQ(dev[i].sampled_logprobs[k].token, host[i].sampled_logprobs[k].token);
      EXPECT_FLOAT_EQ(dev[i].sampled_logprobs[k].logprob, host[i].sampled_logprobs[k].logprob);
    }
  }
  // The samplers really sampled: seeded rows differ from greedy decoding.
  int differs = 0;
  for (std::size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].sampling.temperature > 0 &&
        dev[i].tokens != toy_greedy(reqs[i].prompt, 14, kToyVocab))
      ++differs;
  EXPECT_GE(differs, 6);
}

TEST(EngineDeviceSampling, StepsThatNeedLogitsSampleOnTheHostWithTheSameDraws) {
  auto reqs = mixed_requests();
  reqs[2].sampling.logprobs = 3;    // top-3 alternatives need the logits row
  reqs[2].sampling.max_tokens = 4;  // done early: the later steps can sample on the device
  reqs[5].sampling.prompt_logprobs = true;
  std::int64_t host_steps = 0, device_steps = 0;
  const auto host = run(reqs, false);
  const auto dev = run(reqs, true, &host_steps, &device_steps);
  EXPECT_GT(host_steps, 0);
  EXPECT_GT(device_steps, 0);  // once request 2 is done, the rest sample on the device
  for (std::size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(dev[i].tokens, host[i].tokens) << i;
  ASSERT_EQ(dev[2].top_logprobs.size(), 4u);
  for (const auto &top : dev[2].top_logprobs) EXPECT_EQ(top.size(), 3u);
  EXPECT_EQ(dev[5].prompt_logprobs.size(), reqs[5].prompt.size());
  EXPECT_TRUE(dev[5].prompt_logprobs.back().has_value());
}

TEST(EngineDeviceSampling, ConfigOffKeepsSamplingOnTheHost) {
  auto cfg = small_config();
  cfg.device_sampling = false;
  ToyEngine e(64, 4, cfg, [](ToyRunner &r) { r.device_sampling = true; });
  Collector c;
  auto req = greedy_request(1, random_prompt(3, 9), 5);
  req.sampling.temperature = 1.0f;
  e->submit(req, c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).tokens.size(), 5u);
  EXPECT_EQ(e.runner->sampled_forwards.load(), 0);
  EXPECT_GT(e.runner->forwards.load(), 0);
}

TEST(EngineDeviceSampling, TokenOutsideTheVocabularyFailsTheRequestNotTheEngine) {
  ToyEngine e(64, 4, small_config(), [](ToyRunner &r) {
    r.device_sampling = true;
    r.sample_offset = 5000;
  });
  Collector c;
  e->submit(greedy_request(1, random_prompt(4, 9), 5), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).finish, FinishReason::kError);
  EXPECT_NE(c.get(1).error.find("outside the vocabulary"), std::string::npos) << c.get(1).error;
  EXPECT_TRUE(c.get(1).tokens.empty());
  // The engine still serves, and frees what the failed request held.
  ASSERT_TRUE(eventually([&] { return e->status().kv_blocks_used == 0; }));
  EXPECT_EQ(e->status().running, 0);
}

}  // namespace
}  // namespace keel::test
