// CudaModelRunner's fused decode path: the layers and LM head of a step of at most
// fused_decode_max_m rows on the kernels of k_decode_fused.h -- RMSNorm in the next GEMV's
// prologue, the residual add in the o_proj / down GEMVs' epilogue, SwiGLU in the gate_up
// GEMV's epilogue, bias + q/k norm + RoPE + KV write in one kernel -- launched as
// programmatic dependents (Hopper PDL) when programmatic_launch is on. It runs the
// Llama-family plan (arch::LayerPlan) as fixed fused groups; allocate_buffers turns the
// path off for a plan with a step it does not implement (fused_path_runs). A mixture-of-
// experts layer's MLP is launch_moe_decode (cuda_runner_moe.cpp, k_moe_decode.h). GGUF
// linear weights kept quantized run the same steps on the integer-dot GEMV
// (fused_linear.h); allocate_buffers keeps the path only where every weight's layout allows.
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/fused_linear.h"
#include "exec/cuda/k_decode_fused.h"

namespace keel::cuda {

void CudaModelRunner::launch_fused_layers(const StepShape &shape, AttnParams ap,
                                          AttnParams ap_multi, AttnParams ap_flash) {
  const StreamRef s = ctx_.compute();
  const int T = shape.T, R = shape.R, sms = ctx_.num_sms();
  const std::int32_t *d = dev_in_.as<std::int32_t>();
  const std::int32_t *d_positions = d + T, *d_slots = d + 2 * T, *d_rows = d + 3 * T;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  float *residual = residual_.as<float>();
  // One GEMV: y = W x(in), M rows, W laid out as `fmt` (bf16 or GGUF ranges).
  auto gemv = [&](const void *w, const LinearLayout &fmt, GemvIn in, const void *x,
                  const bf16 *norm_weight, GemvOut out, void *y, int M,
                  const std::int32_t *rows = nullptr) {
    FusedGemvParams p;
    p.M = M;
    p.in = in;
    p.x = static_cast<const bf16 *>(x);
    p.residual = residual;
    p.rows = rows;
    p.norm_weight = norm_weight;
    p.eps = eps;
    p.out = out;
    p.y = y;
    p.pdl = pdl_;
    p.mma = fused_mma_;
    p.max_waves = fused_waves_;
    launch_fused_linear(s, fmt, w, p, sms, qgemv_choice_);
  };
  QkvRopeKvParams rk;
  rk.qkv = qkv_.as<bf16>();
  rk.T = T;
  rk.num_q_heads = static_cast<int>(nh_);
  rk.num_kv_heads = static_cast<int>(nkv_);
  rk.head_dim = static_cast<int>(hd_);
  rk.eps = eps;
  rk.positions = d_positions;
  rk.inv_freq = inv_freq_.as<float>();
  rk.mscale = rope_mscale_;
  rk.interleaved = config_.rope_style == RopeStyle::kInterleaved;
  rk.slots = d_slots;
  rk.cache = kv_->data();
  rk.layout = kv_->layout();
  rk.pdl = pdl_;
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const Layer &L = layers_[li];
    const int layer = static_cast<int>(li);
    // residual (embedding, or the last down_proj's epilogue) -> input norm -> qkv.
    gemv(L.qkv.data(), L.qkv_fmt, GemvIn::kRmsNorm, nullptr, L.input_norm.as<bf16>(),
         GemvOut::kBf16, qkv_.data(), T);
    profiler_.mark(s, StepProfiler::kGemm);
    rk.bias = L.qkv_bias.as<bf16>();
    rk.q_norm = L.q_norm.as<bf16>();
    rk.k_norm = L.k_norm.as<bf16>();
    rk.layer = layer;
    launch_qkv_rope_kv(s, rk);
    profiler_.mark(s, StepProfiler::kOther);
    set_attention_layer(shape, layer, ap, ap_multi, ap_flash);
    launch_decode_attention(s, ap);
    launch_paged_attention(s, ap_multi);
    if (shape.n_flash > 0) launch_flash_attention(s, ap_flash);
    profiler_.mark(s, StepProfiler::kAttention);
    // o_proj adds into the residual; post norm in gate_up's prologue and SwiGLU in its
    // epilogue (a warp computes a gate row and its up row); down adds into the residual.
    gemv(L.o.data(), L.o_fmt, GemvIn::kBf16, attn_.data(), nullptr, GemvOut::kAddResidual, residual,
         T);
    profiler_.mark(s, StepProfiler::kGemm);
    if (plans_[li].has(arch::LayerStep::kMoeFfn)) {
      launch_moe_decode(L, T);  // post norm, router, experts, residual add (k_moe_decode.h)
    } else {
      gemv(L.gate_up.data(), L.gate_up_fmt, GemvIn::kRmsNorm, nullptr, L.post_norm.as<bf16>(),
           GemvOut::kSwiglu, act_.data(), T);
      gemv(L.down.data(), L.down_fmt, GemvIn::kBf16, act_.data(), nullptr, GemvOut::kAddResidual,
           residual, T);
      profiler_.mark(s, StepProfiler::kGemm);
    }
    // The residual holds the layer's output (the epilogues added into it). A plain launch
    // between programmatic dependents: the next one waits for it to finish.
    capture_hidden(layer, nullptr, T);
  }
  if (R > 0) {
    gemv(lm_head_data(), lm_head_fmt_, GemvIn::kRmsNorm, nullptr, final_norm_.as<bf16>(),
         GemvOut::kF32, logits_.data(), R, d_rows);
    profiler_.mark(s, StepProfiler::kGemm);
  }
}

}  // namespace keel::cuda
