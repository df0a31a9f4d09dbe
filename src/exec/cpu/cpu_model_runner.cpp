#include "exec/cpu/cpu_model_runner.h"

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "exec/arch/eagle3_head.h"

namespace keel::cpu {

CpuModelRunner::CpuModelRunner(const ModelConfig &cfg, const arch::WeightLookup &lookup,
                               std::shared_ptr<const void> keepalive, ExecContext &ctx,
                               KvOptions kv, const parallel::ShardPlan *shard,
                               parallel::Communicator *comm)
    : keepalive_(std::move(keepalive)), ctx_(ctx), comm_(comm), lookup_(lookup) {
  if (cfg.kv_layout == KvLayout::kLatent) {
    if (shard || comm)
      throw Error(ErrorCode::kUnsupported,
                  "tensor parallelism is not supported for multi-head latent attention yet");
    mla_ = std::make_unique<arch::MlaModel>(cfg, lookup);
    kv_ = CpuKvStore::latent(kv.num_blocks, kv.block_size, cfg.num_layers,
                             kv_values_per_token_layer(cfg), &ctx);
  } else {
    llama_ = std::make_unique<arch::LlamaModel>(cfg, lookup, shard);
    kv_ = std::make_unique<CpuKvStore>(kv.num_blocks, kv.block_size, cfg.num_layers,
                                       llama_->shard().kv_heads, cfg.head_dim, &ctx);
  }
  if (const char *v = std::getenv("KEEL_CPU_GREEDY_HEAD")) greedy_head_ = std::string(v) != "off";
}

KvBlockStore &CpuModelRunner::kv() { return *kv_; }

void CpuModelRunner::load_mtp() {
  ctx_.check_owner("CpuModelRunner::load_mtp");
  if (mtp_) return;
  if (comm_)
    throw Error(ErrorCode::kUnsupported, "MTP drafting under tensor parallelism is not built yet");
  mtp_ =
      mla_ ? std::make_unique<arch::MtpHead>(config(), lookup_, mla_->embed(), mla_->lm_head())
           : std::make_unique<arch::MtpHead>(config(), lookup_, llama_->embed(), llama_->lm_head());
}

void CpuModelRunner::mtp_forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) {
  ctx_.check_owner("CpuModelRunner::mtp_forward");
  if (!mtp_) throw Error(ErrorCode::kInternal, "cpu runner: mtp_forward before load_mtp");
  mtp_->forward(cache, in, out, ctx_);
}

namespace {
// The CPU head (arch::Eagle3Head) on the runner's ExecContext.
class CpuEagle3Runner final : public Eagle3Runner {
 public:
  CpuEagle3Runner(std::unique_ptr<arch::Eagle3Head> head, ExecContext &ctx)
      : head_(std::move(head)), ctx_(ctx) {}
  const Eagle3Config &config() const override { return head_->config(); }
  const std::vector<std::int32_t> &aux_layers() const override { return head_->aux_layers(); }
  std::int64_t weights_bytes() const override { return head_->weights_bytes(); }
  void forward(MtpCache &cache, const MtpInput &in, MtpOutput &out) override {
    ctx_.check_owner("eagle3 head");
    head_->forward(cache, in, out, ctx_);
  }
  void truncate(MtpCache &cache, std::int32_t kept) override {
    cache.length = kept;
    cache.rows.resize(static_cast<std::size_t>(kept * head_->cache_row_floats()));
  }

 private:
  std::unique_ptr<arch::Eagle3Head> head_;
  ExecContext &ctx_;
};
}  // namespace

std::unique_ptr<Eagle3Runner> CpuModelRunner::open_eagle3_head(const std::filesystem::path &dir) {
  ctx_.check_owner("CpuModelRunner::open_eagle3_head");
  if (comm_)
    throw Error(ErrorCode::kUnsupported, "a tensor-parallel rank cannot run an EAGLE-3 head yet");
  if (mla_)
    throw Error(ErrorCode::kUnsupported,
                "multi-head latent attention targets do not return their layers' hidden states "
                "yet");
  return std::make_unique<CpuEagle3Runner>(
      std::make_unique<arch::Eagle3Head>(dir, config(), llama_->embed()), ctx_);
}

const arch::LlamaModel &CpuModelRunner::model() const {
  if (!llama_) throw Error(ErrorCode::kInternal, "cpu runner: not a Llama-family model");
  return *llama_;
}

void CpuModelRunner::forward(const ForwardBatch &batch, ForwardOutput &out) {
  ctx_.check_owner("CpuModelRunner::forward");
  if (mla_)
    mla_->forward(batch, out, *kv_, ctx_);
  else
    llama_->forward(batch, out, *kv_, ctx_, comm_);
}

bool CpuModelRunner::samples_row_on_device(const SamplingParams &p) const {
  return p.greedy() && p.logprobs < 0 && p.repetition_penalty == 1.0f &&
         p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f;
}

void CpuModelRunner::forward_sample(const ForwardBatch &batch,
                                    std::span<const DeviceSampleRow> rows, ForwardOutput &out) {
  ctx_.check_owner("CpuModelRunner::forward_sample");
  for (const DeviceSampleRow &r : rows)
    if (!r.params || !samples_row_on_device(*r.params) || !r.mask.empty())
      throw Error(ErrorCode::kInternal, "cpu runner: a row it cannot sample in the lm_head");
  if (mla_)
    mla_->forward(batch, out, *kv_, ctx_, arch::LlamaModel::Head::kGreedyIds);
  else
    llama_->forward(batch, out, *kv_, ctx_, comm_, arch::LlamaModel::Head::kGreedyIds);
  if (out.sampled.size() != rows.size())
    throw Error(ErrorCode::kInternal, "cpu runner: sample rows do not match the batch's");
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

std::unique_ptr<ModelRunner> CpuModelRunner::open_sibling(const std::filesystem::path &path,
                                                          std::int32_t num_blocks) {
  if (comm_ != nullptr)
    throw Error(ErrorCode::kUnsupported,
                "a tensor-parallel rank cannot run a second model beside it");
  return open(path, ctx_,
              KvOptions{num_blocks > 0 ? num_blocks : kv_->num_blocks(), kv_->block_size()});
}

}  // namespace keel::cpu
