// ModelRunner for the CPU backend: a Llama-family model (or a multi-head latent attention
// one, exec/arch/mla.h, over a latent cache) over memory-mapped weights and a paged
// float32 KV cache, computed with the ExecContext's thread pool. Under tensor
// parallelism, one rank's runner: its shard of the weights, a KV cache of its KV heads,
// and the group's communicator (engine/tp/runner.h drives the group).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "exec/arch/llama.h"
#include "exec/arch/mla.h"
#include "exec/arch/mtp_head.h"
#include "exec/cpu/kv_store.h"
#include "exec/exec_context.h"
#include "exec/model_runner.h"

namespace keel::cpu {

struct KvOptions {
  std::int32_t num_blocks = 256;
  std::int32_t block_size = 16;
};

class CpuModelRunner final : public ModelRunner {
 public:
  // `keepalive` owns whatever the weight views point into (the mapped files).
  // `shard` and `comm` (which must outlive the runner) together, or neither.
  CpuModelRunner(const ModelConfig &cfg, const arch::WeightLookup &lookup,
                 std::shared_ptr<const void> keepalive, ExecContext &ctx, KvOptions kv,
                 const parallel::ShardPlan *shard = nullptr,
                 parallel::Communicator *comm = nullptr);

  // Opens an HF model directory or a GGUF file; with `comm`, as rank comm->rank() of
  // a tensor-parallel group of comm->size() ranks.
  static std::unique_ptr<CpuModelRunner> open(const std::filesystem::path &path, ExecContext &ctx,
                                              KvOptions kv, parallel::Communicator *comm = nullptr);

  const ModelConfig &config() const override { return mla_ ? mla_->config() : llama_->config(); }
  // The files' matrix dtypes: the CPU multiplies by the weights as stored (set by open()).
  std::string weight_format() const override { return weight_format_; }
  KvBlockStore &kv() override;
  void forward(const ForwardBatch &batch, ForwardOutput &out) override;
  // Greedy rows without penalties or logprobs take their argmax inside the lm_head
  // (cpu::linear_argmax): no [rows, vocab] logits to write and read back. Unsharded only;
  // KEEL_CPU_GREEDY_HEAD=off turns it off (for A/B benchmarks).
  bool samples_on_device() const override { return comm_ == nullptr && greedy_head_; }
  bool samples_row_on_device(const SamplingParams &p) const override;
  // Any slice may ask for kTail rows (the logits of its last num_logits tokens).
  bool verifies_drafts() const override { return true; }
  void forward_sample(const ForwardBatch &batch, std::span<const DeviceSampleRow> rows,
                      ForwardOutput &out) override;

  // The MTP layer of GLM-4.5, DeepSeek-V3 / Kimi K2 or GLM-5 (exec/arch/mtp_head.h);
  // tensor-parallel ranks refuse by name for now.
  // A second model on this runner's ExecContext (a draft model).
  std::unique_ptr<ModelRunner> open_sibling(const std::filesystem::path &path,
                                            std::int32_t num_blocks) override;
  void load_mtp() override;
  void mtp_forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) override;
  // The CPU EAGLE-3 head (exec/arch/eagle3_head.h) on this runner's ExecContext; tensor-
  // parallel ranks and MLA models refuse by name.
  std::unique_ptr<Eagle3Runner> open_eagle3_head(const std::filesystem::path &dir) override;

  // The Llama-family model (Error kInternal for an MLA model, which has no tensor-parallel
  // path).
  const arch::LlamaModel &model() const;
  CpuKvStore &local_kv() { return *kv_; }
  // Bytes of weights read per decoded token (LlamaModel / MlaModel::weight_bytes).
  std::int64_t decode_weight_bytes() const {
    return mla_ ? mla_->weight_bytes() : llama_->weight_bytes();
  }

 private:
  std::shared_ptr<const void> keepalive_;
  ExecContext &ctx_;
  parallel::Communicator *comm_;
  std::unique_ptr<arch::LlamaModel> llama_;  // one of these two
  std::unique_ptr<arch::MlaModel> mla_;
  std::unique_ptr<CpuKvStore> kv_;
  arch::WeightLookup lookup_;           // kept for load_mtp (views into keepalive_)
  std::unique_ptr<arch::MtpHead> mtp_;  // after load_mtp
  std::string weight_format_;
  bool greedy_head_ = true;
};

}  // namespace keel::cpu
