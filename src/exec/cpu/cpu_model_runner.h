// ModelRunner for the CPU backend: a Llama-family model over memory-mapped weights and
// a paged float32 KV cache, computed with the ExecContext's thread pool.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "exec/arch/llama.h"
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
  CpuModelRunner(const ModelConfig &cfg, const arch::WeightLookup &lookup,
                 std::shared_ptr<const void> keepalive, ExecContext &ctx, KvOptions kv);

  // Opens an HF model directory or a GGUF file.
  static std::unique_ptr<CpuModelRunner> open(const std::filesystem::path &path, ExecContext &ctx,
                                              KvOptions kv);

  const ModelConfig &config() const override { return model_.config(); }
  KvBlockStore &kv() override;
  void forward(const ForwardBatch &batch, ForwardOutput &out) override;

  const arch::LlamaModel &model() const { return model_; }

 private:
  std::shared_ptr<const void> keepalive_;
  ExecContext &ctx_;
  arch::LlamaModel model_;
  CpuKvStore kv_;
};

}  // namespace keel::cpu
