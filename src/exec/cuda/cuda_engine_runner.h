// The CUDA backend packaged for an engine: a runner that owns its CudaContext (the
// engine's EngineBackend holds exactly one ModelRunner), built on the engine thread so
// that thread owns the context, and the `--device cuda[:N]` parser.
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>

#include "exec/cuda/cuda_context.h"
#include "exec/cuda/cuda_model_runner.h"

namespace keel::cuda {

// "cuda" -> 0, "cuda:N" -> N. Throws Error(kInvalidArgument) for anything else
// (the caller decides what "cpu" means).
int parse_cuda_device(std::string_view spec);

class OwningCudaRunner final : public ModelRunner {
 public:
  // Makes a context on `device` and opens the model there (HF directory or GGUF).
  static std::unique_ptr<OwningCudaRunner> open(const std::filesystem::path &path, int device,
                                                const CudaRunnerOptions &opts);
  // Pseudo-random bf16 weights of `config`'s shape made on the device (benchmarks).
  static std::unique_ptr<OwningCudaRunner> random(const ModelConfig &config, int device,
                                                  std::uint64_t seed,
                                                  const CudaRunnerOptions &opts);

  const ModelConfig &config() const override { return runner_->config(); }
  KvBlockStore &kv() override { return runner_->kv(); }
  void forward(const ForwardBatch &batch, ForwardOutput &out) override {
    runner_->forward(batch, out);
  }
  std::string weight_format() const override { return runner_->weight_format(); }
  bool samples_on_device() const override { return runner_->samples_on_device(); }
  bool verifies_drafts() const override { return runner_->verifies_drafts(); }
  std::int32_t max_logits_rows() const override { return runner_->max_logits_rows(); }
  bool masks_on_device() const override { return runner_->masks_on_device(); }
  void forward_sample(const ForwardBatch &batch, std::span<const DeviceSampleRow> rows,
                      ForwardOutput &out) override {
    runner_->forward_sample(batch, rows, out);
  }

  // A second model on this context and stream (a draft model), with this runner's
  // options but a KV pool of `num_blocks` blocks (0: what half the free memory holds,
  // at most this runner's count). Destroy it before this runner.
  std::unique_ptr<ModelRunner> open_sibling(const std::filesystem::path &path,
                                            std::int32_t num_blocks) override;
  // The MTP layer on this context and stream (CudaModelRunner::load_mtp).
  void load_mtp() override { runner_->load_mtp(); }
  void mtp_forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) override {
    runner_->mtp_forward(cache, in, out);
  }
  std::int64_t mtp_weights_bytes() const override { return runner_->mtp_weights_bytes(); }
  std::int64_t mtp_reserved_bytes() const override { return runner_->mtp_reserved_bytes(); }
  // The EAGLE-3 head on this context and stream (CudaModelRunner::open_eagle3_head).
  std::unique_ptr<Eagle3Runner> open_eagle3_head(const std::filesystem::path &dir) override {
    return runner_->open_eagle3_head(dir);
  }

  CudaContext &context() { return *ctx_; }
  CudaModelRunner &runner() { return *runner_; }

 private:
  OwningCudaRunner() = default;
  // Declared in this order so the runner is destroyed before its context.
  std::unique_ptr<CudaContext> ctx_;
  std::unique_ptr<CudaModelRunner> runner_;
  CudaRunnerOptions opts_;  // what runner_ was opened with (open_sibling starts from it)
};

}  // namespace keel::cuda
