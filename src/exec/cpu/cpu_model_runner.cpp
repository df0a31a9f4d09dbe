#include "exec/cpu/cpu_model_runner.h"

namespace keel::cpu {

CpuModelRunner::CpuModelRunner(const ModelConfig &cfg, const arch::WeightLookup &lookup,
                               std::shared_ptr<const void> keepalive, ExecContext &ctx,
                               KvOptions kv, const parallel::ShardPlan *shard,
                               parallel::Communicator *comm)
    : keepalive_(std::move(keepalive)),
      ctx_(ctx),
      comm_(comm),
      model_(cfg, lookup, shard),
      kv_(kv.num_blocks, kv.block_size, cfg.num_layers, model_.shard().kv_heads, cfg.head_dim,
          &ctx) {}

KvBlockStore &CpuModelRunner::kv() { return kv_; }

void CpuModelRunner::forward(const ForwardBatch &batch, ForwardOutput &out) {
  ctx_.check_owner("CpuModelRunner::forward");
  model_.forward(batch, out, kv_, ctx_, comm_);
}

}  // namespace keel::cpu

// ---------------------------------------------------------------- opening a model
#include "core/error.h"
#include "formats/model_weights.h"

namespace keel::cpu {

std::unique_ptr<CpuModelRunner> CpuModelRunner::open(const std::filesystem::path &path,
                                                     ExecContext &ctx, KvOptions kv,
                                                     parallel::Communicator *comm) {
  std::shared_ptr<ModelWeights> weights = ModelWeights::open(path);
  arch::WeightLookup lookup =
      [w = weights.get()](const std::string &name) -> std::optional<TensorView> {
    if (const TensorView *t = w->find(name)) return *t;
    return std::nullopt;
  };
  std::unique_ptr<CpuModelRunner> runner;
  if (!comm) {
    runner = std::make_unique<CpuModelRunner>(weights->config(), lookup, weights, ctx, kv);
  } else {
    const parallel::ShardPlan plan =
        parallel::make_shard_plan(weights->config(), comm->rank(), comm->size());
    runner =
        std::make_unique<CpuModelRunner>(weights->config(), lookup, weights, ctx, kv, &plan, comm);
  }
  runner->weight_format_ = weights->linear_dtypes();
  return runner;
}

}  // namespace keel::cpu
