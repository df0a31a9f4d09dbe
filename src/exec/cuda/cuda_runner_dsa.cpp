// CudaModelRunner's DeepSeek Sparse Attention (glm_moe_dsa; exec/arch/dsa_indexer.h has the
// math, k_dsa_indexer.h the kernels). In a layer that runs its indexer, after the latent
// rows are written:
//   q_idx     = wq_b q_lat                        -> dsa_q_  [T, Hi Di] f32
//   k | w     = [wk; weights_proj] h              -> dsa_kw_ [T, Di + Hi] f32 (one GEMM)
//   row tail  = rope(LayerNorm(k))                (launch_dsa_key_write, each token's slot)
//   scores    -> dsa_scores_, in passes of dsa_rows_ queries (rows of max_model_len floats;
//                on the tensor cores for GLM-5's Di 128, k_dsa_scores_mma.h)
//   selection -> dsa_sel_ [T, index_topk]         (launch_dsa_topk, per pass)
// and the latent attention reads dsa_sel_ (this layer's, or for a "shared" layer the last
// selecting layer's). Every launch's shape depends on the step's StepShape alone (the
// passes on T), so decode and verify graphs capture it like the rest of the layer.
#include <algorithm>

#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/cuda_runner_detail.h"
#include "exec/cuda/k_dsa_indexer.h"

namespace keel::cuda {

void CudaModelRunner::allocate_dsa_buffers(const CudaRunnerOptions &opts) {
  const MlaConfig &m = *config_.mla;
  const std::size_t T = max_tokens_;
  const std::int64_t Hi = m.index_n_heads, Di = m.index_head_dim;
  dsa_q_ = DeviceBuffer(T * Hi * Di * sizeof(float));
  dsa_kw_ = DeviceBuffer(T * (Di + Hi) * sizeof(float));
  dsa_tokens_ = DeviceBuffer(T * sizeof(DsaToken));
  dsa_sel_ = DeviceBuffer(T * m.index_topk * sizeof(std::int32_t));
  const std::int64_t row_bytes = std::int64_t(max_model_len_) * sizeof(float);
  dsa_rows_ = static_cast<std::int32_t>(
      std::clamp<std::int64_t>(opts.dsa_score_bytes / row_bytes, 1, max_tokens_));
  dsa_scores_ = DeviceBuffer(static_cast<std::size_t>(dsa_rows_) * row_bytes);
  // ~144 KB a row (histogram + candidates); more rows a launch only matter for prefill.
  dsa_topk_rows_ = std::min<std::int32_t>(dsa_rows_, 64);
  dsa_topk_scratch_ = DeviceBuffer(dsa_topk_scratch_bytes(dsa_topk_rows_));
}

void CudaModelRunner::launch_dsa_indexer(const Layer &L, int layer, const StepShape &shape,
                                         const MlaRope &rp) {
  const MlaConfig &m = *config_.mla;
  const StreamRef s = ctx_.compute();
  const std::int32_t T = shape.T;
  const std::int32_t *d = dev_in_.as<std::int32_t>();
  const std::int32_t *d_positions = d + T, *d_slots = d + 2 * T;
  const int Hi = static_cast<int>(m.index_n_heads), Di = static_cast<int>(m.index_head_dim);
  const int rope = static_cast<int>(m.qk_rope_head_dim), topk = static_cast<int>(m.index_topk);
  const int key_at = static_cast<int>(m.kv_lora_rank) + rope;

  run_linear(gemm_, s, L.dsa_wq_b_fmt, L.dsa_wq_b.data(), mla_qlat_.as<bf16>(), dsa_q_.data(), true,
             T, dequant_scratch_.data());
  run_linear(gemm_, s, L.dsa_wk_proj_fmt, L.dsa_wk_proj.data(), normed_.as<bf16>(), dsa_kw_.data(),
             true, T, dequant_scratch_.data());
  profiler_.mark(s, StepProfiler::kGemm);
  launch_dsa_key_write(s, dsa_kw_.as<float>(), T, Di + Hi, Di, L.dsa_k_norm.as<float>(),
                       d_positions, rp, rope, d_slots, kv_->data(), kv_->layout(), layer, key_at);
  DsaToken *tokens = dsa_tokens_.as<DsaToken>();
  launch_dsa_tokens(s, reinterpret_cast<const AttnTile *>(d + shape.tiles_at),
                    shape.n_single + shape.n_multi + shape.n_flash, tokens);

  DsaScoreParams p;
  p.q = dsa_q_.as<float>();
  p.w = dsa_kw_.as<float>() + Di;
  p.w_stride = Di + Hi;
  p.tokens = tokens;
  p.block_table = d + shape.table_at;
  p.cache = kv_->data();
  p.layout = kv_->layout();
  p.layer = layer;
  p.key_at = key_at;
  p.Hi = Hi;
  p.Di = Di;
  p.rope = rope;
  p.rp = rp;
  p.topk = topk;
  p.T = T;
  p.scores = dsa_scores_.as<float>();
  p.stride = max_model_len_;
  p.mma = dsa_scores_mma_;
  for (std::int32_t t0 = 0; t0 < T; t0 += dsa_rows_) {
    p.t0 = t0;
    p.rows = std::min(dsa_rows_, T - t0);
    p.ctas_per_row = dsa_scores_ctas_per_row(p, max_model_len_, ctx_.num_sms());
    launch_dsa_scores(s, p);
    launch_dsa_topk(s, p.scores, p.stride, tokens, T, t0, p.rows, topk, dsa_sel_.as<std::int32_t>(),
                    dsa_topk_scratch_.data(), dsa_topk_rows_);
  }
  profiler_.mark(s, StepProfiler::kAttention);
}

}  // namespace keel::cuda
