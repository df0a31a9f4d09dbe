// Speculative decoding on the CUDA runner (issue 30): a verify is a ragged slice of
// 1 + k tokens whose kTail rows come back as logits rows (or device-sampled rows). With
// n-gram drafts on a copy-heavy prompt, greedy output of the built-in default model is
// the output without drafts, one request at a time and eight at once, sampled on the
// device and on the host, and drafts are accepted. A draft model on the target's CUDA
// context (ModelRunner::open_sibling) keeps it up to bf16 near ties (see below). An EAGLE-3
// head on the device (ModelRunner::open_eagle3_head, the runner's hidden rows) keeps it too, and
// so does the checkpoint's MTP layer on the device (ModelRunner::load_mtp) on tiny MoE models.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "cuda_test_util.h"
#include "engine/engine.h"
#include "exec/cuda/cuda_engine_runner.h"
#include "formats/make_eagle3_head.h"
#include "formats/make_model.h"
#include "formats/model_config.h"
#include "support/copying_mtp_layer.h"
#include "support/paths.h"
#include "unit/engine/collector.h"

namespace keel::cuda {
namespace {

// `tokens`: ids drawn from [5, 5 + tokens).
GenerationRequest greedy(std::uint64_t id, int variant, int tokens = 3000) {
  GenerationRequest r;
  r.id = RequestId{id};
  // A phrase said three times: the lookup finds what followed it before.
  std::vector<TokenId> phrase;
  for (int k = 0; k < 17 + variant; ++k) phrase.push_back(5 + (k * 53 + variant * 211) % tokens);
  for (int rep = 0; rep < 3; ++rep) r.prompt.insert(r.prompt.end(), phrase.begin(), phrase.end());
  r.sampling.max_tokens = 40;
  r.sampling.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  return r;
}

struct Outputs {
  std::vector<keel::test::Collected> out;
  EngineStatus status;
};

// `method`: empty for no speculation, else SpeculativeConfig::method.
// `logprobs`: SamplingParams::logprobs of every request (-1: none). `tokens`: greedy()'s.
Outputs run(const std::filesystem::path &dir, const std::string &method, bool device_sampling,
            int at_once, int logprobs = -1, int tokens = 3000) {
  EngineConfig cfg;
  cfg.device_sampling = device_sampling;
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.max_num_batched_tokens = 256;
  if (!method.empty()) {
    cfg.speculative.method = method;
    cfg.speculative.num_speculative_tokens = 4;
    cfg.speculative.max_running = 0;   // draft at any batch size
    cfg.speculative.adaptive = false;  // whenever allowed: these tests are about the step
  }
  Engine e(
      [&] {
        CudaRunnerOptions o;
        o.num_kv_blocks = 256;
        o.max_batch_tokens = 256;
        o.max_seqs = 8;
        o.max_logits_rows = 24;  // fewer than 8 x (1 + 4): the engine must fit its drafts
        o.max_model_len = 512;
        o.gpu_sampling = device_sampling;
        EngineBackend b;
        b.runner = OwningCudaRunner::open(dir, 0, o);
        return b;
      },
      cfg);
  keel::test::Collector c;
  Outputs r;
  const int n = 8;
  for (int i = 0; i < n; i += at_once) {
    for (int j = i; j < i + at_once; ++j) {
      GenerationRequest r = greedy(j + 1, j, tokens);
      r.sampling.logprobs = logprobs;
      e.submit(std::move(r), c.sink());
    }
    EXPECT_TRUE(c.wait_finished(i + at_once));
  }
  for (int i = 0; i < n; ++i) r.out.push_back(c.get(i + 1));
  r.status = e.status();
  return r;
}

// Greedy output with `method` (`label` in the log) is the output without drafts, token for
// token, and verify steps ran. Returns the runs without and with drafts.
std::pair<Outputs, Outputs> expect_same_output(const std::filesystem::path &dir,
                                               const std::string &method, const char *label,
                                               bool device, int at_once, int logprobs = -1) {
  std::pair<Outputs, Outputs> r{run(dir, "", device, at_once, logprobs),
                                run(dir, method, device, at_once, logprobs)};
  const Outputs &off = r.first, &on = r.second;
  for (std::size_t i = 0; i < off.out.size(); ++i) {
    EXPECT_EQ(off.out[i].tokens.size(), 40u) << off.out[i].error;
    EXPECT_EQ(on.out[i].tokens, off.out[i].tokens)
        << label << ", request " << i << (device ? ", device" : ", host") << " sampling, "
        << at_once << " at once " << on.out[i].error;
  }
  EXPECT_EQ(off.status.spec_drafted, 0);
  EXPECT_GT(on.status.spec_steps, 0);
  std::printf(
      "[ spec ] %s, %s sampling, %d at once: %lld verify steps, %lld of %lld drafts "
      "accepted\n",
      label, device ? "device" : "host", at_once, static_cast<long long>(on.status.spec_steps),
      static_cast<long long>(on.status.spec_accepted),
      static_cast<long long>(on.status.spec_drafted));
  return r;
}

TEST(CudaEngineSpeculative, GreedyOutputIsTheSameWithDrafts) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = keel::test::source_dir() / "models" / "default";
  if (!std::filesystem::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << dir;
  for (const bool device : {true, false})
    for (const int at_once : {1, 8})
      EXPECT_GT(
          expect_same_output(dir, "ngram", "ngram", device, at_once).second.status.spec_accepted,
          0);
}

// How far drafting moved the greedy output: a request's tokens are the same, or they
// part where the output without drafts had a near tie (the token chosen with drafts is
// among its top logprobs within `tie` nats of the best). A verify slice of 1 + k rows
// runs other kernels than a one-token step (the tensor-core GEMV, the general attention
// kernel with its own split over the keys), so its bf16 logits round differently: a
// near tie may go either way, as it does when the batch size changes without drafts.
// Anything else (a token far from the best) is a bug in the step.
struct TieReport {
  int identical = 0;
  int parted_at_ties = 0;
  float widest_gap = 0.0f;      // logprob of the best - of the chosen, where they parted
  float prefix_lp_diff = 0.0f;  // largest |logprob difference| before they part
  std::string failures;
};

void compare_at_ties(const keel::test::Collected &off, const keel::test::Collected &on, float tie,
                     TieReport &t) {
  const std::size_t n = std::min(off.tokens.size(), on.tokens.size());
  std::size_t i = 0;
  while (i < n && off.tokens[i] == on.tokens[i]) ++i;
  for (std::size_t j = 0;
       j < i && j < off.sampled_logprobs.size() && j < on.sampled_logprobs.size(); ++j)
    t.prefix_lp_diff = std::max(t.prefix_lp_diff, std::abs(off.sampled_logprobs[j].logprob -
                                                           on.sampled_logprobs[j].logprob));
  if (i == n && off.tokens.size() == on.tokens.size()) {
    ++t.identical;
    return;
  }
  if (i >= n || i >= off.top_logprobs.size() || off.top_logprobs[i].empty()) {
    t.failures += " [lengths " + std::to_string(off.tokens.size()) + "/" +
                  std::to_string(on.tokens.size()) + "]";
    return;
  }
  const auto &top = off.top_logprobs[i];
  float chosen = -1e30f;
  for (const TokenLogprob &c : top)
    if (c.token == on.tokens[i]) chosen = c.logprob;
  const float gap = top.front().logprob - chosen;
  t.widest_gap = std::max(t.widest_gap, gap);
  if (gap <= tie) {
    ++t.parted_at_ties;
  } else {
    char buf[160];
    std::snprintf(buf, sizeof buf, " [token %zu: %d (best %d by %.3g nats)]", i, on.tokens[i],
                  top.front().token, gap);
    t.failures += buf;
  }
}

// Each request of `off` (40 tokens) against the same request of `on`, into t.
void compare_runs_at_ties(const Outputs &off, const Outputs &on, float tie, TieReport &t) {
  for (std::size_t i = 0; i < off.out.size(); ++i) {
    ASSERT_EQ(off.out[i].tokens.size(), 40u) << off.out[i].error;
    compare_at_ties(off.out[i], on.out[i], tie, t);
  }
}

// The default model drafting for itself (nearly every draft accepted, so nearly every
// token comes from a verify row) and its trained draft, on the device. Greedy output is
// the output without drafts wherever the target's choice is not a near tie
// (compare_at_ties); session 17 found 3 of 8 requests parting from about the 18th token.
TEST(CudaEngineSpeculative, DraftModelOnTheDeviceKeepsTheGreedyOutputUpToTies) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = keel::test::source_dir() / "models" / "default";
  if (!std::filesystem::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << dir;
  std::vector<std::filesystem::path> drafts{dir};
  // The trained draft shipped beside the default model, where it is.
  if (std::filesystem::exists(dir / "draft" / "model.safetensors")) drafts.push_back(dir / "draft");
  constexpr float kTie = 0.1f;
  for (const auto &draft : drafts) {
    for (const bool device : {true, false}) {
      for (const int at_once : {1, 8}) {
        const Outputs off = run(dir, "", device, at_once, 5);
        const Outputs on = run(dir, "draft:" + draft.string(), device, at_once, 5);
        TieReport t;
        ASSERT_NO_FATAL_FAILURE(compare_runs_at_ties(off, on, kTie, t));
        EXPECT_EQ(t.failures, "") << draft << (device ? ", device" : ", host") << " sampling, "
                                  << at_once << " at once";
        EXPECT_EQ(on.status.spec_method, "draft");
        EXPECT_GT(on.status.spec_draft_kv_bytes, 0);
        EXPECT_GT(on.status.spec_steps, 0);
        if (draft == dir)
          EXPECT_GT(on.status.spec_accepted, on.status.spec_drafted * 9 / 10);
        else
          EXPECT_GT(on.status.spec_accepted, 0);
        std::printf(
            "[ spec ] draft %s, %s sampling, %d at once: %lld verify steps, %lld of %lld "
            "drafts accepted; %d of 8 identical, %d parted at ties (widest gap %.4f nats), "
            "logprobs before parting within %.4f\n",
            draft.filename().c_str(), device ? "device" : "host", at_once,
            static_cast<long long>(on.status.spec_steps),
            static_cast<long long>(on.status.spec_accepted),
            static_cast<long long>(on.status.spec_drafted), t.identical, t.parted_at_ties,
            t.widest_gap, t.prefix_lp_diff);
      }
    }
  }
}

// `--speculative eagle3:PATH` on the device: a random head for the default model (its drafts
// nearly all rejected, so nearly every step is a verify of 1 + k rows whose first row is the
// token) and the trained head shipped beside it (models/default/eagle3, where it is). Greedy
// output is the output without drafts wherever the target's choice is not a near tie
// (compare_at_ties, as for a draft model: the first H100 run, session 21, parted 2 of 8
// requests at one at a time, at ties, with the random head), drafts are proposed, and the
// head's weights show in the status.
TEST(CudaEngineSpeculative, Eagle3HeadOnTheDeviceKeepsTheGreedyOutputUpToTies) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = keel::test::source_dir() / "models" / "default";
  if (!std::filesystem::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << dir;
  const auto random = std::filesystem::temp_directory_path() /
                      ("keel-cuda-eagle3-default-" + std::to_string(::getpid()));
  std::filesystem::remove_all(random);
  MakeEagle3Options o;
  o.target = load_hf_config(dir);
  o.seed = 7;
  o.out = random;
  make_eagle3_head(o);
  std::vector<std::filesystem::path> heads{random};
  if (std::filesystem::exists(dir / "eagle3" / "model.safetensors"))
    heads.push_back(dir / "eagle3");
  for (const auto &head : heads) {
    for (const bool device : {true, false}) {
      for (const int at_once : {1, 8}) {
        const Outputs off = run(dir, "", device, at_once, 5);
        const Outputs on = run(dir, "eagle3:" + head.string(), device, at_once, 5);
        TieReport t;
        ASSERT_NO_FATAL_FAILURE(compare_runs_at_ties(off, on, 0.1f, t));
        EXPECT_EQ(t.failures, "") << head << (device ? ", device" : ", host") << " sampling, "
                                  << at_once << " at once";
        EXPECT_EQ(on.status.spec_method, "eagle3");
        EXPECT_GT(on.status.spec_drafted, 0);
        EXPECT_GT(on.status.spec_draft_weights_bytes, 0);
        if (head != random) EXPECT_GT(on.status.spec_accepted, 0);
        std::printf(
            "[ spec ] eagle3 %s, %s sampling, %d at once: %lld verify steps, %lld of %lld "
            "drafts accepted; %d of 8 identical, %d parted at ties (widest gap %.4f nats)\n",
            head == random ? "random" : "trained", device ? "device" : "host", at_once,
            static_cast<long long>(on.status.spec_steps),
            static_cast<long long>(on.status.spec_accepted),
            static_cast<long long>(on.status.spec_drafted), t.identical, t.parted_at_ties,
            t.widest_gap);
      }
    }
  }
  std::filesystem::remove_all(random);
}

// `--speculative mtp` on the device (CudaModelRunner::load_mtp, exec/cuda/cuda_mtp_layer.h)
// over tiny glm4_moe (GQA), deepseek_v3 (MLA) and glm_moe_dsa (MLA with its own DSA
// indexer) models with an MTP layer: a random one (drafts proposed, nearly all rejected) and
// one wired to copy the target (support/copying_mtp_layer.h; its head the target's LM head
// on the device: drafts repeat the last token, and the target's repetitions accept some).
// Greedy output is the output without drafts up to bf16 near ties (compare_at_ties: the tiny
// models' logits are flat, so ties are common), drafts are proposed, and the layer's device
// memory shows in the status.
TEST(CudaEngineSpeculative, MtpLayerOnTheDeviceKeepsTheGreedyOutputUpToTies) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("keel-cuda-engine-mtp-" + std::to_string(::getpid()));
  for (const char *arch : {"glm4_moe", "deepseek_v3", "glm_moe_dsa"}) {
    for (const bool copying : {false, true}) {
      std::filesystem::remove_all(dir);
      MakeModelOptions o;
      o.arch = arch;
      o.shape = "tiny";  // vocabulary 512
      o.layers = 2;
      o.mtp_layers = 1;
      o.dtype = DType::kF32;  // (rewritable)
      o.seed = 3;
      o.out = dir;
      o.threads = 2;
      make_model(o);
      if (copying) keel::test::make_mtp_layer_copying(dir / "model.safetensors", 2);
      std::int64_t accepted = 0;
      for (const int at_once : {1, 8}) {
        const Outputs off = run(dir, "", false, at_once, 5, 500);
        const Outputs on = run(dir, "mtp", false, at_once, 5, 500);
        TieReport t;
        ASSERT_NO_FATAL_FAILURE(compare_runs_at_ties(off, on, 0.1f, t));
        EXPECT_EQ(t.failures, "") << arch << (copying ? " copying" : " random") << ", " << at_once
                                  << " at once";
        EXPECT_EQ(on.status.spec_method, "mtp");
        EXPECT_GT(on.status.spec_drafted, 0);
        EXPECT_GT(on.status.spec_draft_weights_bytes, 0);
        accepted += on.status.spec_accepted;
        std::printf(
            "[ spec ] mtp %s (%s), %d at once: %lld verify steps, %lld of %lld drafts "
            "accepted; %d of 8 identical, %d parted at ties (widest gap %.4f nats)\n",
            arch, copying ? "copying" : "random", at_once,
            static_cast<long long>(on.status.spec_steps),
            static_cast<long long>(on.status.spec_accepted),
            static_cast<long long>(on.status.spec_drafted), t.identical, t.parted_at_ties,
            t.widest_gap);
      }
      if (copying) EXPECT_GT(accepted, 0) << arch;
    }
  }
  std::filesystem::remove_all(dir);
}

// Without drafts, eight requests at once against one at a time: the same kind of
// parting (a step's rows run other kernels as the batch changes), for scale.
TEST(CudaEngineSpeculative, BatchingAloneMovesGreedyOutputOnlyAtTies) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = keel::test::source_dir() / "models" / "default";
  if (!std::filesystem::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << dir;
  const Outputs alone = run(dir, "", false, 1, 5);
  const Outputs batched = run(dir, "", false, 8, 5);
  TieReport t;
  for (std::size_t i = 0; i < alone.out.size(); ++i)
    compare_at_ties(alone.out[i], batched.out[i], 0.1f, t);
  EXPECT_EQ(t.failures, "");
  std::printf(
      "[ spec ] no drafts, 8 at once against 1: %d of 8 identical, %d parted at ties "
      "(widest gap %.4f nats), logprobs before parting within %.4f\n",
      t.identical, t.parted_at_ties, t.widest_gap, t.prefix_lp_diff);
}

}  // namespace
}  // namespace keel::cuda
