// CudaModelRunner's multi-head latent attention (deepseek_v3, kimi_k2; exec/arch/mla.h has
// the math): the layer's kQkvProj step runs the whole block over normed_'s rows,
//   q    = q_b(rmsnorm(q_a h)) (or q_proj h)            -> qkv_ [T, nh, nope + rope]
//   ckv  = kv_a h                                       -> mla_ckv_ [T, kv_lora + rope]
//   cache row = [rmsnorm(c) | rope(k_rope)]             (launch_mla_kv_write, each token's slot)
//   attn = absorbed attention over the latent cache     -> mla_attn_ [T, nh, v]
//   proj_ = o_proj attn
// through the same staged inputs (positions, slots, tiles, block table) as the split K/V
// attention; GLM-5's DSA indexer (cuda_runner_dsa.cpp) between the cache write and the
// attention, which then reads each query's selection. A step over the split path's rows (a
// prefill) runs it a chunk of those rows at a time, one query a tile (mla_prefill_chunks). Decode
// and verify steps replay CUDA graphs like every model's (a padding row's tile reads position 0 of
// the step's first block table entry; its output is never used); no fused decode kernels yet
// (allocate_buffers).
#include <algorithm>
#include <string>

#include "core/error.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/cuda_runner_detail.h"

namespace keel::cuda {

using runner_detail::bf16_bytes;

KvLayout CudaModelRunner::mla_kv_layout(std::int32_t block_size) const {
  // [layers][block_size][kv_lora + rope] a block: one plane, one "head" of the latent row.
  KvLayout layout;
  layout.num_layers = static_cast<int>(config_.num_layers);
  layout.block_size = block_size;
  layout.num_kv_heads = 1;
  layout.head_dim = static_cast<int>(kv_values_per_token_layer(config_));
  layout.planes = 1;
  return layout;
}

arch::LayerPlan CudaModelRunner::mla_layer_plan(std::int64_t layer) const {
  using S = arch::LayerStep;
  arch::LayerPlan p;
  const bool sparse = config_.moe && config_.moe->sparse(layer);
  // Dense first layers (first_k_dense_replace) run the MLP.
  for (const S s : {S::kInputNorm, S::kQkvProj, S::kResidualAdd, S::kPostNorm,
                    sparse ? S::kMoeFfn : S::kGateUpProj})
    p.steps.push_back(s);
  if (!sparse)
    for (const S s : {S::kSwiglu, S::kDownProj}) p.steps.push_back(s);
  p.steps.push_back(S::kResidualAdd);
  return p;
}

void CudaModelRunner::allocate_mla_buffers(const CudaRunnerOptions &opts) {
  const MlaConfig &m = *config_.mla;
  const std::size_t T = max_tokens_;
  mla_qlat_ = DeviceBuffer(m.q_lora_rank > 0 ? T * bf16_bytes(m.q_lora_rank) : 0);
  mla_ckv_ = DeviceBuffer(T * bf16_bytes(m.kv_lora_rank + m.qk_rope_head_dim));
  mla_attn_ = DeviceBuffer(T * bf16_bytes(nh_ * m.v_head_dim));
  // Decode-size steps (graph buckets, verify steps) take the split path; its scratch holds
  // qa and the partials of mla_split_max_rows rows x splits (so a step's split factor is
  // capped at those rows / the step's).
  const int R = static_cast<int>(m.kv_lora_rank), H = static_cast<int>(nh_);
  dsa_scores_mma_ = opts.kernels.dsa_scores_mma;
  if (opts.kernels.mla_split_max_rows > 0 &&
      mla_split_supported(R, static_cast<int>(m.qk_rope_head_dim),
                          static_cast<int>(kv_values_per_token_layer(config_)))) {
    mla_split_rows_ = std::min<std::int32_t>(max_tokens_, opts.kernels.mla_split_max_rows);
    mla_split_ = DeviceBuffer(mla_split_scratch_bytes(mla_split_rows_, H, R, 1));
    mla_prefill_chunks_ = opts.kernels.mla_prefill_chunks;
  }
}

void CudaModelRunner::launch_mla_attention_block(const Layer &L, int layer,
                                                 const StepShape &shape) {
  const MlaConfig &m = *config_.mla;
  const StreamRef s = ctx_.compute();
  const std::int32_t T = shape.T;
  const std::int32_t *d = dev_in_.as<std::int32_t>();
  const std::int32_t *d_positions = d + T, *d_slots = d + 2 * T;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const int R = static_cast<int>(m.kv_lora_rank), rope = static_cast<int>(m.qk_rope_head_dim);
  bf16 *normed = normed_.as<bf16>(), *q = qkv_.as<bf16>(), *ckv = mla_ckv_.as<bf16>();

  if (m.q_lora_rank > 0) {
    const int ql = static_cast<int>(m.q_lora_rank);
    run_linear(gemm_, s, L.mla_q_a_fmt, L.mla_q_a.data(), normed, mla_qlat_.data(), false, T,
               dequant_scratch_.data());
    launch_rmsnorm_rows(s, mla_qlat_.as<bf16>(), T, ql, ql, L.mla_q_a_norm.as<bf16>(), eps);
    run_linear(gemm_, s, L.mla_q_fmt, L.mla_q.data(), mla_qlat_.as<bf16>(), q, false, T,
               dequant_scratch_.data());
  } else {
    run_linear(gemm_, s, L.mla_q_fmt, L.mla_q.data(), normed, q, false, T, dequant_scratch_.data());
  }
  run_linear(gemm_, s, L.mla_kv_a_fmt, L.mla_kv_a.data(), normed, ckv, false, T,
             dequant_scratch_.data());
  profiler_.mark(s, StepProfiler::kGemm);

  MlaRope rp;
  rp.inv_freq = inv_freq_.as<float>();
  rp.mscale = rope_mscale_;
  rp.interleaved = config_.rope_style == RopeStyle::kInterleaved;
  launch_mla_kv_write(s, ckv, T, R, rope, L.mla_kv_a_norm.as<bf16>(), eps, d_positions, rp, d_slots,
                      kv_->data(), kv_->layout(), layer);
  // DSA: a layer with its own indexer selects (writing its index keys first); a "shared"
  // one reuses the selection of the last layer that did.
  if (L.dsa_wq_b.bytes()) launch_dsa_indexer(L, layer, shape, rp);

  MlaAttnParams p;
  p.q = q;
  p.kv_b = L.mla_kv_b.as<bf16>();
  // Every staged tile, whichever kernel the split K/V path would give it (a tile names its
  // own query count, so the ranges' different tile_q do not matter here).
  p.tiles = reinterpret_cast<const AttnTile *>(d + shape.tiles_at);
  p.num_tiles = shape.n_single + shape.n_multi + shape.n_flash;
  p.block_table = d + shape.table_at;
  p.cache = kv_->data();
  p.layout = kv_->layout();
  p.layer = layer;
  p.num_heads = static_cast<int>(nh_);
  p.nope = static_cast<int>(m.qk_nope_head_dim);
  p.rope = rope;
  p.v = static_cast<int>(m.v_head_dim);
  p.kv_lora = R;
  p.scale = static_cast<float>(m.softmax_scale);
  p.rp = rp;
  p.out = mla_attn_.as<bf16>();
  if (m.dsa()) {
    p.sel = dsa_sel_.as<std::int32_t>();
    p.topk = static_cast<int>(m.index_topk);
  }
  p.num_splits = shape.splits_mla;
  p.T = T;
  p.scratch = mla_split_.data();
  if (shape.mla_chunk_tiles_at > 0) {
    // A prefill: the split path a chunk of mla_split_rows_ rows at a time (its scratch's
    // rows, one split), each row its own tile, q_start relative to the chunk.
    const auto *chunk_tiles = reinterpret_cast<const AttnTile *>(d + shape.mla_chunk_tiles_at);
    const int H = static_cast<int>(nh_), qk = static_cast<int>(m.qk_nope_head_dim) + rope;
    for (std::int32_t r0 = 0; r0 < T; r0 += mla_split_rows_) {
      const std::int32_t n = std::min(mla_split_rows_, T - r0);
      MlaAttnParams c = p;
      c.q = q + std::int64_t(r0) * H * qk;
      c.out = p.out + std::int64_t(r0) * H * p.v;
      if (c.sel) c.sel += std::int64_t(r0) * p.topk;
      c.tiles = chunk_tiles + r0;
      c.num_tiles = n;
      c.T = n;
      c.num_splits = 1;
      launch_mla_attention(s, c);
    }
  } else {
    launch_mla_attention(s, p);
  }
  profiler_.mark(s, StepProfiler::kAttention);

  run_linear(gemm_, s, L.o_fmt, L.o.data(), mla_attn_.as<bf16>(), proj_.data(), false, T,
             dequant_scratch_.data());
  profiler_.mark(s, StepProfiler::kGemm);
}

}  // namespace keel::cuda
