// Speculative decoding on the CUDA runner (issue 30): a verify is a ragged slice of
// 1 + k tokens whose kTail rows come back as logits rows (or device-sampled rows). With
// n-gram drafts on a copy-heavy prompt, greedy output of the built-in default model is
// the output without drafts, one request at a time and eight at once, sampled on the
// device and on the host, and drafts are accepted. A draft model on the target's CUDA
// context (ModelRunner::open_sibling) must give the same guarantee (disabled: see below).
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "engine/engine.h"
#include "exec/cuda/cuda_engine_runner.h"
#include "support/paths.h"
#include "unit/engine/collector.h"

namespace keel::cuda {
namespace {

GenerationRequest greedy(std::uint64_t id, int variant) {
  GenerationRequest r;
  r.id = RequestId{id};
  // A phrase said three times: the lookup finds what followed it before.
  std::vector<TokenId> phrase;
  for (int k = 0; k < 17 + variant; ++k) phrase.push_back(5 + (k * 53 + variant * 211) % 3000);
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
Outputs run(const std::filesystem::path &dir, const std::string &method, bool device_sampling,
            int at_once) {
  EngineConfig cfg;
  cfg.device_sampling = device_sampling;
  cfg.scheduler.max_num_seqs = 8;
  cfg.scheduler.max_num_batched_tokens = 256;
  if (!method.empty()) {
    cfg.speculative.method = method;
    cfg.speculative.num_speculative_tokens = 4;
    cfg.speculative.max_running = 0;  // draft at any batch size
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
    for (int j = i; j < i + at_once; ++j) e.submit(greedy(j + 1, j), c.sink());
    EXPECT_TRUE(c.wait_finished(i + at_once));
  }
  for (int i = 0; i < n; ++i) r.out.push_back(c.get(i + 1));
  r.status = e.status();
  return r;
}

TEST(CudaEngineSpeculative, GreedyOutputIsTheSameWithDrafts) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = keel::test::source_dir() / "models" / "default";
  if (!std::filesystem::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << dir;
  for (const bool device : {true, false}) {
    for (const int at_once : {1, 8}) {
      const Outputs off = run(dir, "", device, at_once);
      const Outputs on = run(dir, "ngram", device, at_once);
      for (std::size_t i = 0; i < off.out.size(); ++i) {
        ASSERT_EQ(off.out[i].tokens.size(), 40u) << off.out[i].error;
        EXPECT_EQ(on.out[i].tokens, off.out[i].tokens)
            << "request " << i << (device ? ", device" : ", host") << " sampling, " << at_once
            << " at once";
      }
      EXPECT_EQ(off.status.spec_drafted, 0);
      EXPECT_GT(on.status.spec_steps, 0);
      EXPECT_GT(on.status.spec_accepted, 0);
      std::printf(
          "[ spec ] %s sampling, %d at once: %lld verify steps, %lld of %lld drafts "
          "accepted\n",
          device ? "device" : "host", at_once, static_cast<long long>(on.status.spec_steps),
          static_cast<long long>(on.status.spec_accepted),
          static_cast<long long>(on.status.spec_drafted));
    }
  }
}

// The default model drafting for itself on the device: the draft's greedy tokens are the
// target's up to bf16 ties between a one-token forward and a verify slice, so nearly
// every draft is accepted, and the output must be the output without drafts.
// DISABLED: on an H100 (session 17, scripts/device/s17a_h200.sh) 3 of 8 requests' tokens
// differed from the output without drafts from about the 18th token on, in every
// sampling and batching case, while n-gram drafts above keep it; why is not found yet
// (tests/cuda/draft_on_cuda_diag_test.cpp varies the settings), so `keel serve` and
// `keel engine` refuse `draft:` with a CUDA device (check_draft_device). Run with
// --gtest_also_run_disabled_tests.
TEST(CudaEngineSpeculative, DISABLED_DraftModelOnTheDeviceKeepsTheGreedyOutput) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = keel::test::source_dir() / "models" / "default";
  if (!std::filesystem::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << dir;
  std::vector<std::filesystem::path> drafts{dir};
  // The trained draft shipped beside the default model, where it is.
  if (std::filesystem::exists(dir / "draft" / "model.safetensors")) drafts.push_back(dir / "draft");
  for (const auto &draft : drafts) {
    for (const bool device : {true, false}) {
      for (const int at_once : {1, 8}) {
        const Outputs off = run(dir, "", device, at_once);
        const Outputs on = run(dir, "draft:" + draft.string(), device, at_once);
        for (std::size_t i = 0; i < off.out.size(); ++i) {
          ASSERT_EQ(off.out[i].tokens.size(), 40u) << off.out[i].error;
          EXPECT_EQ(on.out[i].tokens, off.out[i].tokens)
              << draft << ", request " << i << (device ? ", device" : ", host") << " sampling, "
              << at_once << " at once";
        }
        EXPECT_EQ(on.status.spec_method, "draft");
        EXPECT_GT(on.status.spec_draft_kv_bytes, 0);
        EXPECT_GT(on.status.spec_steps, 0);
        if (draft == dir)
          EXPECT_GT(on.status.spec_accepted, on.status.spec_drafted * 9 / 10);
        else
          EXPECT_GT(on.status.spec_accepted, 0);
        std::printf(
            "[ spec ] draft %s, %s sampling, %d at once: %lld verify steps, %lld of "
            "%lld drafts accepted\n",
            draft.filename().c_str(), device ? "device" : "host", at_once,
            static_cast<long long>(on.status.spec_steps),
            static_cast<long long>(on.status.spec_accepted),
            static_cast<long long>(on.status.spec_drafted));
      }
    }
  }
}

}  // namespace
}  // namespace keel::cuda
