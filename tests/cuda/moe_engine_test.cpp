// A tiny qwen3_moe (make_model) served by the engine on the CUDA runner, prefix cache on,
// decode through CUDA graphs: requests run one at a time, so each step's batch -- and so
// its logits -- is the same whether the GPU or the host samples; the GPU sampler must
// then give the host's tokens and logprobs, the later requests must find their shared
// prompt prefix in the cache, and every request must finish whole.
#include <gtest/gtest.h>
#include <unistd.h>

#include "cuda_test_util.h"
#include "engine/engine.h"
#include "exec/cuda/cuda_engine_runner.h"
#include "formats/make_model.h"
#include "unit/engine/collector.h"

namespace keel::cuda {
namespace {

std::vector<GenerationRequest> requests(int vocab) {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 5; ++i) {
    GenerationRequest r;
    r.id = RequestId{static_cast<std::uint64_t>(i + 1)};
    // 48 shared tokens (three full blocks), then a tail of its own.
    for (int k = 0; k < 48; ++k) r.prompt.push_back(3 + (k * 37) % (vocab - 3));
    for (int k = 0; k < 5 + 3 * i; ++k) r.prompt.push_back(3 + (k * 53 + i * 101) % (vocab - 3));
    r.sampling.max_tokens = 16;
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = 0;
    r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.8f;
    r.sampling.seed = 700 + i;
    out.push_back(r);
  }
  return out;
}

std::vector<keel::test::Collected> run(const std::filesystem::path &dir, bool device_sampling) {
  EngineConfig cfg;
  cfg.device_sampling = device_sampling;
  cfg.enable_prefix_caching = true;
  cfg.scheduler.max_num_seqs = 4;
  cfg.scheduler.max_num_batched_tokens = 128;
  Engine e(
      [&] {
        CudaRunnerOptions o;
        o.num_kv_blocks = 64;
        o.max_batch_tokens = 128;
        o.max_seqs = 4;
        o.max_logits_rows = 4;
        o.max_model_len = 256;
        o.gpu_sampling = true;
        o.kernels.moe_gemv_max_tokens = 16;  // prefill on the per-expert GEMMs, decode on the GEMVs
        EngineBackend b;
        b.runner = OwningCudaRunner::open(dir, 0, o);
        return b;
      },
      cfg);
  keel::test::Collector c;
  std::vector<keel::test::Collected> out;
  int n = 0;
  for (const auto &r : requests(512)) {
    e.submit(r, c.sink());
    EXPECT_TRUE(c.wait_finished(++n));
    out.push_back(c.get(r.id.value));
  }
  return out;
}

TEST(CudaMoeEngine, DeviceSamplingGivesTheHostTokensWithPrefixHits) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("keel-cuda-moe-engine-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  MakeModelOptions o;
  o.arch = "qwen3_moe";
  o.shape = "tiny";
  o.dtype = DType::kBF16;
  o.seed = 9;
  o.out = dir;
  o.threads = 2;
  make_model(o);
  const auto host = run(dir, false);
  const auto dev = run(dir, true);
  std::filesystem::remove_all(dir);
  ASSERT_EQ(host.size(), dev.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    ASSERT_EQ(dev[i].tokens.size(), 16u) << i << " " << dev[i].error;
    EXPECT_EQ(dev[i].tokens, host[i].tokens) << "request " << i;
    ASSERT_EQ(dev[i].sampled_logprobs.size(), host[i].sampled_logprobs.size());
    for (std::size_t k = 0; k < dev[i].sampled_logprobs.size(); ++k)
      EXPECT_NEAR(dev[i].sampled_logprobs[k].logprob, host[i].sampled_logprobs[k].logprob, 1e-4)
          << i << " " << k;
    if (i > 0) EXPECT_GE(dev[i].cached_prompt_tokens, 48) << "request " << i;
  }
}

}  // namespace
}  // namespace keel::cuda
