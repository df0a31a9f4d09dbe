// CudaModelRunner's forward pass, eagerly: the embedding, each layer's kernels in the
// order of the model's layer sequence, and the LM head over the requested rows. Steps of
// few rows take the fused decode kernels instead (cuda_runner_fused.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_model_runner.h"

namespace keel::cuda {

void CudaModelRunner::attention_params(const StepShape &shape, AttnParams &ap, AttnParams &ap_multi,
                                       AttnParams &ap_flash) const {
  const std::int32_t *d = dev_in_.as<std::int32_t>();
  const auto *d_tiles = reinterpret_cast<const AttnTile *>(d + shape.tiles_at);
  ap = AttnParams{};
  ap.qkv = qkv_.as<bf16>();
  ap.row_stride = static_cast<int>(qkv_width_);
  ap.tiles = d_tiles;
  ap.num_tiles = shape.n_single;
  ap.tile_q = tile_q_;
  ap.block_table = d + shape.table_at;
  ap.cache = kv_->data();
  ap.layout = kv_->layout();
  ap.num_q_heads = static_cast<int>(nh_);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hd_));
  ap.num_splits = shape.splits_single;
  ap.partial_o = partial_o_.as<float>();
  ap.partial_ml = partial_ml_.as<float>();
  ap.split_counters = split_counters_.as<unsigned>();  // decode split-K merged in the kernel
  ap.out = attn_.as<bf16>();
  ap.smem_per_block = ctx_.features().smem_per_block;
  ap_multi = ap;
  ap_multi.tiles = d_tiles + shape.n_single;
  ap_multi.num_tiles = shape.n_multi;
  ap_multi.num_splits = shape.splits_multi;
  ap_flash = ap;
  ap_flash.tiles = d_tiles + shape.n_single + shape.n_multi;
  ap_flash.num_tiles = shape.n_flash;
  ap_flash.tile_q = flash_tile_q_;
  ap_flash.num_splits = 1;
  set_attention_layer(shape, 0, ap, ap_multi, ap_flash);
}

int CudaModelRunner::layer_window(std::int64_t layer) const {
  return static_cast<int>(std::min<std::int64_t>(config_.window_of(layer).value_or(0),
                                                 std::numeric_limits<int>::max()));
}

void CudaModelRunner::set_attention_layer(const StepShape &shape, int layer, AttnParams &ap,
                                          AttnParams &ap_multi, AttnParams &ap_flash) const {
  const Layer &L = layers_[static_cast<std::size_t>(layer)];
  const int window = layer_window(layer);
  for (AttnParams *p : {&ap, &ap_multi, &ap_flash}) {
    p->layer = layer;
    p->window = window;
    p->sinks = L.sinks.bytes() ? L.sinks.as<float>() : nullptr;
  }
  const bool narrow = attn_path_.narrow_window > 0 && window == attn_path_.narrow_window;
  ap.num_splits = narrow ? shape.splits_single_narrow : shape.splits_single;
  ap_multi.num_splits = narrow ? shape.splits_multi_narrow : shape.splits_multi;
}

void CudaModelRunner::launch_step(const StepShape &shape) {
  const StreamRef s = ctx_.compute();
  const std::int32_t T = shape.T;
  const int R = shape.R;
  const std::int32_t *d = dev_in_.as<std::int32_t>();
  const std::int32_t *d_tokens = d, *d_positions = d + T, *d_slots = d + 2 * T, *d_rows = d + 3 * T;

  const float eps = static_cast<float>(config_.rms_norm_eps);
  bf16 *normed = normed_.as<bf16>(), *qkv = qkv_.as<bf16>(), *proj = proj_.as<bf16>();
  float *residual = residual_.as<float>();
  if (fed_.rows)  // the MTP layer's block: the caller's rows, not the tokens' embedding
    KEEL_CUDA_CHECK(cudaMemcpyAsync(residual, fed_.rows, std::size_t(T) * H_ * sizeof(float),
                                    cudaMemcpyDeviceToDevice, s.get("cuda runner: fed rows")));
  else
    launch_embedding(s, d_tokens, T, embed_.as<bf16>(), V_, static_cast<int>(H_), residual);
  AttnParams ap, ap_multi, ap_flash;
  attention_params(shape, ap, ap_multi, ap_flash);
  profiler_.begin(s);
  if (T <= fused_max_m_) {
    launch_fused_layers(shape, ap, ap_multi, ap_flash);
    return;
  }
  // The residual stream's pending add (o_proj or down_proj output), folded into the
  // next norm by launch_add_rmsnorm.
  const bf16 *pending = nullptr;
  const bf16 *bias = nullptr;
  using S = arch::LayerStep;
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const Layer &L = layers_[li];
    const int layer = static_cast<int>(li);
    set_attention_layer(shape, layer, ap, ap_multi, ap_flash);
    for (const arch::LayerStep step : plans_[li].steps) {
      switch (step) {
        case S::kInputNorm:
        case S::kPostNorm:
          launch_add_rmsnorm(s, pending, residual,
                             (step == S::kInputNorm ? L.input_norm : L.post_norm).as<bf16>(),
                             normed, T, static_cast<int>(H_), eps);
          pending = nullptr;
          profiler_.mark(s, StepProfiler::kOther);
          break;
        case S::kQkvProj:
          if (mla_) {  // the whole latent attention block, o_proj included
            launch_mla_attention_block(L, layer, shape);
            break;
          }
          run_linear(gemm_, s, L.qkv_fmt, L.qkv.data(), normed, qkv, false, T,
                     dequant_scratch_.data());
          profiler_.mark(s, StepProfiler::kGemm);
          break;
        case S::kOBias:
          launch_add_bf16(s, proj, L.o_bias.as<bf16>(), T, static_cast<int>(H_), true);
          profiler_.mark(s, StepProfiler::kOther);
          break;
        case S::kQkvBias:  // one launch with the q/k norm when the plan has both
          bias = L.qkv_bias.as<bf16>();
          if (plans_[li].has(S::kQkNorm)) break;
          launch_qkv_bias_norm(s, qkv, T, static_cast<int>(nh_), static_cast<int>(nkv_),
                               static_cast<int>(hd_), bias, nullptr, nullptr, eps);
          bias = nullptr;
          break;
        case S::kQkNorm:
          launch_qkv_bias_norm(s, qkv, T, static_cast<int>(nh_), static_cast<int>(nkv_),
                               static_cast<int>(hd_), bias, L.q_norm.as<bf16>(),
                               L.k_norm.as<bf16>(), eps);
          bias = nullptr;
          break;
        case S::kRope:
          launch_rope(s, qkv, T, static_cast<int>(qkv_width_), static_cast<int>(nh_),
                      static_cast<int>(nkv_), static_cast<int>(hd_), d_positions,
                      inv_freq_.as<float>(), rope_mscale_,
                      config_.rope_style == RopeStyle::kInterleaved, rot_dim_);
          break;
        case S::kKvWrite:
          launch_kv_write(s, qkv, T, static_cast<int>(qkv_width_), static_cast<int>(nh_ * hd_),
                          static_cast<int>((nh_ + nkv_) * hd_), d_slots, kv_->data(), kv_->layout(),
                          layer);
          profiler_.mark(s, StepProfiler::kOther);
          break;
        case S::kAttention:
          launch_decode_attention(s, ap);
          launch_paged_attention(s, ap_multi);
          if (shape.n_flash > 0) launch_flash_attention(s, ap_flash);
          profiler_.mark(s, StepProfiler::kAttention);
          break;
        case S::kOProj:
          run_linear(gemm_, s, L.o_fmt, L.o.data(), attn_.as<bf16>(), proj, false, T,
                     dequant_scratch_.data());
          profiler_.mark(s, StepProfiler::kGemm);
          break;
        case S::kResidualAdd:
          pending = proj;
          break;
        case S::kGateUpProj:
          run_linear(gemm_, s, L.gate_up_fmt, L.gate_up.data(), normed, gate_up_.data(), false, T,
                     dequant_scratch_.data());
          profiler_.mark(s, StepProfiler::kGemm);
          break;
        case S::kSwiglu:
          launch_swiglu(s, gate_up_.as<bf16>(), act_.as<bf16>(), T, static_cast<int>(I_));
          profiler_.mark(s, StepProfiler::kOther);
          break;
        case S::kDownProj:
          run_linear(gemm_, s, L.down_fmt, L.down.data(), act_.as<bf16>(), proj, false, T,
                     dequant_scratch_.data());
          profiler_.mark(s, StepProfiler::kGemm);
          break;
        case S::kMoeFfn:  // cuda_runner_moe.cpp; the shared expert after the routed sum
          launch_moe(L, T);
          if (moe_S_ > 0) launch_moe_shared(L, T);
          break;
      }
    }
    capture_hidden(layer, pending, T);
  }
  if (R > 0) {
    // The final norm is cheap next to the LM head: norm every row, then only the
    // requested rows go through the LM head.
    launch_add_rmsnorm(s, pending, residual, final_norm_.as<bf16>(), normed, T,
                       static_cast<int>(H_), eps);
    launch_gather_rows(s, normed, d_rows, R, static_cast<int>(H_), rows_in_.as<bf16>());
    profiler_.mark(s, StepProfiler::kOther);
    run_linear(gemm_, s, lm_head_fmt_, lm_head_data(), rows_in_.as<bf16>(), logits_.data(), true, R,
               dequant_scratch_.data());
    profiler_.mark(s, StepProfiler::kGemm);
  }
}

}  // namespace keel::cuda
