#include "exec/cpu/cpu_model_runner.h"

namespace keel::cpu {

CpuModelRunner::CpuModelRunner(const ModelConfig &cfg, const arch::WeightLookup &lookup,
                               std::shared_ptr<const void> keepalive, ExecContext &ctx,
                               KvOptions kv)
    : keepalive_(std::move(keepalive)),
      ctx_(ctx),
      model_(cfg, lookup),
      kv_(kv.num_blocks, kv.block_size, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, &ctx) {}

KvBlockStore &CpuModelRunner::kv() { return kv_; }

void CpuModelRunner::forward(const ForwardBatch &batch, ForwardOutput &out) {
  ctx_.check_owner("CpuModelRunner::forward");
  model_.forward(batch, out, kv_, ctx_);
}

}  // namespace keel::cpu

// ---------------------------------------------------------------- opening a model
#include "core/error.h"
#include "formats/model_weights.h"

namespace keel::cpu {

std::unique_ptr<CpuModelRunner> CpuModelRunner::open(const std::filesystem::path &path,
                                                     ExecContext &ctx, KvOptions kv) {
  std::shared_ptr<ModelWeights> weights = ModelWeights::open(path);
  arch::WeightLookup lookup =
      [w = weights.get()](const std::string &name) -> std::optional<TensorView> {
    if (const TensorView *t = w->find(name)) return *t;
    return std::nullopt;
  };
  return std::make_unique<CpuModelRunner>(weights->config(), lookup, weights, ctx, kv);
}

}  // namespace keel::cpu
