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
#include "formats/safetensors.h"

namespace keel::cpu {

std::unique_ptr<CpuModelRunner> CpuModelRunner::open(const std::filesystem::path &path,
                                                     ExecContext &ctx, KvOptions kv) {
  if (!std::filesystem::is_directory(path))
    throw Error(ErrorCode::kUnsupported, path.string() + ": expected an HF model directory");
  const ModelConfig cfg = load_hf_config(path);
  std::shared_ptr<SafetensorsModel> st = SafetensorsModel::open(path);
  arch::WeightLookup lookup = [st](const std::string &name) -> std::optional<TensorView> {
    if (!st->find(name)) return std::nullopt;
    return st->view(name);
  };
  return std::make_unique<CpuModelRunner>(cfg, lookup, st, ctx, kv);
}

}  // namespace keel::cpu
