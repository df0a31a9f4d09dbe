#include "exec/cuda/cuda_model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/half.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_mtp_layer.h"
#include "exec/cuda/cuda_runner_detail.h"
#include "exec/cuda/k_dsa_indexer.h"
#include "exec/cuda/k_moe.h"
#include "exec/cuda/k_moe_route.h"
#include "formats/model_weights.h"

namespace keel::cuda {

using runner_detail::device_memory;

CudaModelRunner::CudaModelRunner(CudaContext &ctx, ModelConfig config, const WeightSource &weights,
                                 const CudaRunnerOptions &opts)
    : CudaModelRunner(ctx, std::move(config), weights, opts, FedInput{}) {}

// A fed runner (FedInput): rows in place of the embedding, maybe another runner's LM head.

CudaModelRunner::CudaModelRunner(CudaContext &ctx, ModelConfig config, const WeightSource &weights,
                                 const CudaRunnerOptions &opts, const FedInput &fed)
    : ctx_(ctx), config_(std::move(config)), gemm_(ctx), fed_(fed) {
  ctx_.check_owner("CudaModelRunner");
  if (fed_.head && !fed_.rows)
    throw Error(ErrorCode::kInternal, "cuda runner: a borrowed LM head without fed rows");
  if (fed_.rows && config_.tie_word_embeddings)
    throw Error(ErrorCode::kInternal, "cuda runner: a fed runner has no embedding to tie");
  ctx_.activate();
  free_at_open_ = device_memory().free_now;
  validate_config();
  plan_weight_formats(weights, opts.quantized_weights);
  allocate_weights();
  upload_weights(weights);
  allocate_buffers(opts);
}

CudaModelRunner::CudaModelRunner(CudaContext &ctx, ModelConfig config, std::uint64_t seed,
                                 const CudaRunnerOptions &opts)
    : ctx_(ctx), config_(std::move(config)), gemm_(ctx) {
  ctx_.check_owner("CudaModelRunner");
  ctx_.activate();
  free_at_open_ = device_memory().free_now;
  validate_config();
  expert_format_ = bf16_experts(config_);
  if (opts.random_experts_mxfp4 && config_.moe && config_.hidden_size % 32 == 0 &&
      config_.moe->expert_intermediate % 32 == 0)
    expert_format_.format = WeightFormat::kMxfp4;
  allocate_weights();
  randomize_weights(seed);
  allocate_buffers(opts);
}

std::unique_ptr<CudaModelRunner> CudaModelRunner::open(const std::filesystem::path &path,
                                                       CudaContext &ctx,
                                                       const CudaRunnerOptions &opts) {
  const auto weights = ModelWeights::open(path);
  auto runner = std::make_unique<CudaModelRunner>(
      ctx, weights->config(), [&](const std::string &name) { return weights->get(name); }, opts);
  runner->source_ = path;
  return runner;
}

const void *CudaModelRunner::lm_head_data() const {
  if (fed_.head) return fed_.head;
  return config_.tie_word_embeddings ? embed_.data() : lm_head_.data();
}

CudaModelRunner::~CudaModelRunner() {
  // Buffers must not be freed under running kernels; shutdown may wait (unbounded by design:
  // a wedged engine is killed by its supervisor, not joined).
  ctx_.drain();
}

void CudaModelRunner::validate_config() const {
  const auto &c = config_;
  auto fail = [](const std::string &why) {
    throw Error(ErrorCode::kUnsupported, "cuda runner: " + why);
  };
  if (c.mla || c.kv_layout == keel::KvLayout::kLatent) {
    // deepseek_v3 / kimi_k2 (cuda_runner_mla.cpp); GLM-5's DSA indexer (cuda_runner_dsa.cpp).
    if (!c.mla || c.kv_layout != keel::KvLayout::kLatent)
      throw Error(ErrorCode::kFormat, "cuda runner: a latent KV layout without MLA fields");
    const MlaConfig &m = *c.mla;
    if (m.dsa()) {
      const std::int64_t Hi = m.index_n_heads, Di = m.index_head_dim;
      if (Hi <= 0 || Di <= 0 || Di < m.qk_rope_head_dim || m.q_lora_rank <= 0 ||
          static_cast<std::int64_t>(m.index_shared.size()) > c.num_layers || m.shared_selection(0))
        throw Error(ErrorCode::kFormat, "cuda runner: bad DSA indexer sizes");
      // The index key's 16-byte loads, the f32 [k | w] rows, the scores kernel's shared memory.
      if (Di % 8 != 0 || Hi % 4 != 0 || Di > 1024)
        fail("DSA index_head_dim must be a multiple of 8 (at most 1024) and index_n_heads of 4");
      if (dsa_scores_smem(static_cast<int>(Hi), static_cast<int>(Di)) > 48 * 1024)
        fail("DSA index heads x head size beyond the scores kernel's shared memory");
      if (m.index_topk > (1 << 20)) fail("DSA index_topk over 2^20");
    }
    if (c.attention_bias || c.attention_out_bias || c.attention_sinks || c.qk_norm)
      fail("multi-head latent attention with attention biases, sinks or q/k norms");
    if (m.kv_lora_rank <= 0 || m.qk_nope_head_dim <= 0 || m.v_head_dim <= 0 ||
        m.qk_rope_head_dim <= 0 || m.qk_rope_head_dim % 2 != 0 || m.q_lora_rank < 0)
      throw Error(ErrorCode::kFormat, "cuda runner: bad multi-head latent attention sizes");
    // Every projection's rows and columns (cuBLASLt's 16-byte alignment of bf16 rows).
    if (m.kv_lora_rank % 8 != 0 || m.q_lora_rank % 8 != 0 || m.qk_head_dim() % 8 != 0 ||
        (m.kv_lora_rank + m.qk_rope_head_dim) % 8 != 0 || (c.num_heads * m.v_head_dim) % 8 != 0)
      fail("MLA ranks and head sizes must be multiples of 8");
    if (m.kv_lora_rank > 4096 || m.qk_head_dim() > 1024 || m.v_head_dim > 1024)
      fail("MLA sizes beyond the attention kernel's shared memory");
    if (c.num_heads > 65535) fail("more than 65535 heads");
  }
  if (c.hidden_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.vocab_size <= 0 || c.intermediate_size <= 0 || c.head_dim <= 0)
    throw Error(ErrorCode::kFormat, "cuda runner: config has a non-positive dimension");
  if (c.num_heads % c.num_kv_heads != 0)
    throw Error(ErrorCode::kFormat, "cuda runner: num_heads % num_kv_heads != 0");
  if (c.moe) {
    const MoeConfig &m = *c.moe;
    if (m.num_experts <= 0 || m.top_k <= 0 || m.top_k > m.num_experts || m.expert_intermediate <= 0)
      throw Error(ErrorCode::kFormat, "cuda runner: bad mixture-of-experts sizes");
    if (m.num_experts > kMoeMaxExperts)
      fail("more than " + std::to_string(kMoeMaxExperts) + " experts");
    if (m.top_k > kMoeMaxTopK)
      fail("more than " + std::to_string(kMoeMaxTopK) + " experts a token");
    if (m.expert_intermediate % 8 != 0) fail("moe_intermediate_size must be a multiple of 8");
    if (m.scoring == MoeConfig::Scoring::kSigmoid &&
        (m.n_group <= 0 || m.n_group > kMoeMaxGroups || m.num_experts % m.n_group != 0 ||
         m.topk_group <= 0 || m.topk_group > m.n_group))
      fail("n_group " + std::to_string(m.n_group) + " / topk_group " +
           std::to_string(m.topk_group) + " (at most " + std::to_string(kMoeMaxGroups) +
           " groups that divide the experts)");
    if (m.scoring != MoeConfig::Scoring::kSigmoid &&
        (m.n_group != 1 || m.routed_scaling_factor != 1.0))
      fail("n_group / routed_scaling_factor without sigmoid scoring");
    if (m.shared_intermediate % 8 != 0) fail("the shared expert's size must be a multiple of 8");
  }
  if (!c.mla) {  // the split K/V attention kernels' limits (MLA runs k_mla_attention.h)
    if (c.head_dim > kAttnMaxHeadDim || c.head_dim % 8 != 0)
      fail("head_dim " + std::to_string(c.head_dim));
    if (c.num_heads / c.num_kv_heads > kAttnMaxRows) fail("more than 32 query heads per kv head");
  }
  if (c.hidden_size % 8 != 0) fail("hidden_size must be a multiple of 8");
  if (c.vocab_size > (1ll << 31) - 1 || c.hidden_size > (1 << 20) ||
      c.intermediate_size > (1 << 22))
    fail("dimensions beyond the int32 launch range");
}

int CudaModelRunner::enqueue(const ForwardBatch &b, std::vector<std::int32_t> &row_seq,
                             std::vector<std::int32_t> &row_pos, bool hidden) {
  ctx_.check_owner("CudaModelRunner::forward");
  ctx_.activate();
  prepare_hidden(hidden ? &b : nullptr);
  const bool graph = graph_eligible(b);
  int rows = 0;
  const StepShape shape = stage_inputs(b, graph, row_seq, row_pos, rows);
  run_step(shape, graph);
  return rows;
}

void CudaModelRunner::forward(const ForwardBatch &batch, ForwardOutput &out) {
  const int R = enqueue(batch, out.row_seq, out.row_pos, true);
  out.vocab_size = static_cast<std::int32_t>(V_);
  out.logits.resize(static_cast<std::size_t>(R) * V_);
  const std::size_t bytes = static_cast<std::size_t>(R) * V_ * sizeof(float);
  compute_done_.record(ctx_.compute());
  if (R > 0) {
    compute_done_.make_wait(ctx_.copy_d2h());
    KEEL_CUDA_CHECK(cudaMemcpyAsync(host_logits_.data(), logits_.data(), bytes,
                                    cudaMemcpyDeviceToHost,
                                    ctx_.copy_d2h().get("cudaMemcpyAsync")));
    out_copied_.record(ctx_.copy_d2h());
    out_copied_.wait(ctx_.wait_timeout(), "cuda runner: logits copy");
    std::memcpy(out.logits.data(), host_logits_.data(), bytes);
  } else {
    compute_done_.wait(ctx_.wait_timeout(), "cuda runner: forward");
  }
  copy_hidden(batch.total_tokens(), out.hidden);
  profiler_.collect();
}

void CudaModelRunner::forward_greedy(const ForwardBatch &batch, std::vector<TokenId> &next,
                                     std::vector<std::int32_t> *row_seq,
                                     std::vector<float> *hidden) {
  std::vector<std::int32_t> seqs, pos;
  const int R = enqueue(batch, seqs, pos, hidden != nullptr);
  if (R > 0)
    launch_argmax(ctx_.compute(), logits_.as<float>(), R, static_cast<int>(V_),
                  argmax_.as<std::int32_t>(), argmax_scratch_.data(), ctx_.num_sms());
  compute_done_.record(ctx_.compute());
  next.resize(R);
  if (R > 0) {
    compute_done_.make_wait(ctx_.copy_d2h());
    KEEL_CUDA_CHECK(cudaMemcpyAsync(host_tokens_.data(), argmax_.data(), R * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost,
                                    ctx_.copy_d2h().get("cudaMemcpyAsync")));
    out_copied_.record(ctx_.copy_d2h());
    out_copied_.wait(ctx_.wait_timeout(), "cuda runner: token copy");
    std::memcpy(next.data(), host_tokens_.data(), R * sizeof(std::int32_t));
  } else {
    compute_done_.wait(ctx_.wait_timeout(), "cuda runner: forward");
  }
  if (hidden) copy_hidden(batch.total_tokens(), *hidden);
  profiler_.collect();
  if (row_seq) *row_seq = std::move(seqs);
}

}  // namespace keel::cuda
