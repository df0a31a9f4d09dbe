// The engine on the CUDA runner with sampling on the GPU (the `keel engine --device
// cuda` default) against the same engine sampling on the host: for requests run one at
// a time (so every step's batch, and so its logits, is the same in both runs), every
// seeded request gets the same tokens and sampled logprobs, and only token ids cross
// the bus.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "engine/engine.h"
#include "exec/cuda/cuda_engine_runner.h"
#include "support/paths.h"
#include "unit/engine/collector.h"

namespace keel::cuda {
namespace {

// A runner that counts which route each step took.
class CountingRunner final : public ModelRunner {
 public:
  explicit CountingRunner(std::unique_ptr<OwningCudaRunner> r) : r_(std::move(r)) {}
  const ModelConfig &config() const override { return r_->config(); }
  KvBlockStore &kv() override { return r_->kv(); }
  void forward(const ForwardBatch &b, ForwardOutput &out) override {
    ++host_steps;
    r_->forward(b, out);
  }
  bool samples_on_device() const override { return r_->samples_on_device(); }
  void forward_sample(const ForwardBatch &b, std::span<const DeviceSampleRow> rows,
                      ForwardOutput &out) override {
    ++device_steps;
    r_->forward_sample(b, rows, out);
  }
  std::atomic<int> host_steps{0}, device_steps{0};

 private:
  std::unique_ptr<OwningCudaRunner> r_;
};

std::vector<GenerationRequest> requests() {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r;
    r.id = RequestId{static_cast<std::uint64_t>(i + 1)};
    for (int k = 0; k < 11 + 7 * i; ++k) r.prompt.push_back(3 + (k * 37 + i * 101) % 4000);
    r.sampling.max_tokens = 24;
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = 0;
    r.sampling.temperature = i == 5 ? 0.0f : 0.6f + 0.2f * i;
    r.sampling.seed = 500 + i;
    if (i == 1) r.sampling.top_k = 40;
    if (i == 2) r.sampling.top_p = 0.85f;
    if (i == 3) r.sampling.min_p = 0.05f, r.sampling.repetition_penalty = 1.2f;
    if (i == 4) r.sampling.presence_penalty = 0.4f, r.sampling.frequency_penalty = 0.3f;
    out.push_back(r);
  }
  return out;
}

std::vector<keel::test::Collected> run(const std::filesystem::path &dir, bool device, int *host_steps,
                                 int *device_steps) {
  EngineConfig cfg;
  cfg.device_sampling = device;
  cfg.enable_prefix_caching = false;
  cfg.scheduler.max_num_seqs = 4;
  cfg.scheduler.max_num_batched_tokens = 64;
  CountingRunner *counting = nullptr;
  Engine e(
      [&] {
        CudaRunnerOptions o;
        o.num_kv_blocks = 64;
        o.max_batch_tokens = 64;
        o.max_seqs = 4;
        o.max_logits_rows = 4;
        o.max_model_len = 256;
        o.gpu_sampling = true;
        auto r = std::make_unique<CountingRunner>(OwningCudaRunner::open(dir, 0, o));
        counting = r.get();
        EngineBackend b;
        b.runner = std::move(r);
        return b;
      },
      cfg);
  keel::test::Collector c;
  std::vector<keel::test::Collected> out;
  int n = 0;
  for (const auto &r : requests()) {
    e.submit(r, c.sink());
    EXPECT_TRUE(c.wait_finished(++n));  // one at a time: same batches in both runs
    out.push_back(c.get(r.id.value));
  }
  *host_steps = counting->host_steps.load();
  *device_steps = counting->device_steps.load();
  return out;
}

TEST(CudaEngineSampling, DeviceSamplingGivesTheHostTokens) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = keel::test::source_dir() / "models" / "default";
  if (!std::filesystem::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << dir;
  int hs = 0, ds = 0;
  const auto host = run(dir, false, &hs, &ds);
  EXPECT_GT(hs, 0);
  EXPECT_EQ(ds, 0);
  const auto dev = run(dir, true, &hs, &ds);
  EXPECT_EQ(hs, 0);
  EXPECT_GT(ds, 0);
  for (std::size_t i = 0; i < host.size(); ++i) {
    ASSERT_EQ(dev[i].tokens.size(), 24u) << i << " " << dev[i].error;
    EXPECT_EQ(dev[i].tokens, host[i].tokens) << "request " << i;
    ASSERT_EQ(dev[i].sampled_logprobs.size(), host[i].sampled_logprobs.size());
    for (std::size_t k = 0; k < dev[i].sampled_logprobs.size(); ++k)
      EXPECT_NEAR(dev[i].sampled_logprobs[k].logprob, host[i].sampled_logprobs[k].logprob, 1e-4)
          << i << " " << k;
  }
}

}  // namespace
}  // namespace keel::cuda
