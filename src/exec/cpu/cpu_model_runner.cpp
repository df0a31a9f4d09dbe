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
