// CudaModelRunner's mixture-of-experts layers (Qwen3-MoE, Mixtral; the CPU definition is
// exec/arch/moe_ffn.h): the router GEMM, top-k routing and the grouping of token slots by
// expert on the device (k_moe.h), then the experts either as gather-GEMVs (few tokens: a
// fixed launch shape that decode graphs capture) or as one grouped GEMM launch per matrix
// (many tokens; low-bit experts decoded in its shared memory, k_moe_grouped_lowbit.h), or
// with moe_grouped_gemm off one cuBLASLt GEMM per nonempty expert (the host reads the
// group starts first), and the weighted sum back in token order into proj_.
#include <algorithm>
#include <cstring>

#include "exec/cuda/cuda_check.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/cuda_runner_detail.h"
#include "exec/cuda/k_moe.h"
#include "exec/cuda/k_moe_decode.h"

namespace keel::cuda {

using runner_detail::bf16_bytes;

namespace {
// Each expert's group of rows starts at a multiple of this on the GEMM path, so the GEMMs'
// M (the padded count) takes few distinct values and cuBLASLt plans stay few.
constexpr int kGemmAlign = 32;
}  // namespace

void CudaModelRunner::allocate_moe_buffers(const CudaRunnerOptions &opts) {
  if (!config_.moe) return;
  const MoeConfig &m = *config_.moe;
  bool any = false;
  for (std::int64_t l = 0; l < config_.num_layers; ++l) any = any || m.sparse(l);
  if (!any) return;
  has_moe_ = true;
  moe_E_ = m.num_experts;
  moe_k_ = m.top_k;
  moe_I_ = m.expert_intermediate;
  moe_gemv_max_ = std::max(0, opts.kernels.moe_gemv_max_tokens);
  moe_grouped_ = opts.kernels.moe_grouped_gemm &&
                 moe_grouped_gemm_supported(static_cast<int>(2 * moe_I_), static_cast<int>(H_)) &&
                 moe_grouped_gemm_supported(static_cast<int>(H_), static_cast<int>(moe_I_));
  moe_gemm_rows_ = moe_gemm_rows_valid(opts.kernels.moe_gemm_rows) ? opts.kernels.moe_gemm_rows : 0;
  // Low-bit experts decoded inside the grouped GEMM where every sparse layer's shapes and
  // formats allow it (the layers share formats and strides: checking each is cheap).
  moe_lowbit_gemm_ = expert_format_.low_bit() && moe_grouped_ && opts.kernels.moe_lowbit_gemm;
  moe_gguf_qgemv_ = opts.kernels.moe_gguf_qgemv;
  for (std::int64_t l = 0; l < config_.num_layers && moe_lowbit_gemm_; ++l) {
    if (!m.sparse(l)) continue;
    const Layer &L = layers_[static_cast<std::size_t>(l)];
    moe_lowbit_gemm_ =
        moe_grouped_lowbit_supported(grouped_lowbit_weights(layer_experts(L, false)),
                                     static_cast<int>(2 * moe_I_), static_cast<int>(H_)) &&
        moe_grouped_lowbit_supported(grouped_lowbit_weights(layer_experts(L, true)),
                                     static_cast<int>(H_), static_cast<int>(moe_I_));
  }
  // Low-bit experts' slot GEMVs read an expert once per (token, expert) pair. Past E / k
  // tokens a step (about one slot an expert) the grouped GEMM that decodes their blocks
  // reads each active expert once and wins: gpt-oss-20b on the H200 (session 19), 16 / 64 /
  // 256 seqs 929 / 3,316 / 7,801 tok/s against the GEMVs' 898 / 1,033 (to 64 tokens) and
  // the dequantizing path's 5,108 (256). Without it, dequantizing the step's experts to
  // bf16 pays off only past about 8 E / k tokens.
  if (expert_format_.low_bit()) {
    const std::int64_t slots_per_expert = moe_lowbit_gemm_ ? 1 : 8;
    moe_gemv_max_ =
        opts.kernels.moe_lowbit_gemv_max_tokens >= 0
            ? opts.kernels.moe_lowbit_gemv_max_tokens
            : static_cast<int>(std::min<std::int64_t>(
                  moe_gemv_max_, slots_per_expert * moe_E_ / std::max<std::int64_t>(1, moe_k_)));
  }
  const std::int64_t T = max_tokens_, S = T * moe_k_;
  const std::int64_t rows = gemm_rows_cap(S);  // >= the GEMV path's
  moe_logits_ = DeviceBuffer(T * moe_E_ * sizeof(float));
  moe_ids_ = DeviceBuffer(S * sizeof(std::int32_t));
  moe_weights_ = DeviceBuffer(S * sizeof(float));
  moe_group_ = DeviceBuffer(MoeGroupLayout{moe_E_, S, rows}.ints() * sizeof(std::int32_t));
  // The GEMV path runs for at most moe_gemv_max_ tokens and needs no gathered input.
  const bool gemm_path = T > moe_gemv_max_;
  if (gemm_path) {
    moe_xg_ = DeviceBuffer(rows * bf16_bytes(H_));
    moe_gu_ = DeviceBuffer(rows * bf16_bytes(2 * moe_I_));
  }
  moe_act_ = DeviceBuffer(rows * bf16_bytes(moe_I_));
  moe_out_ = DeviceBuffer(rows * bf16_bytes(H_));
  if (expert_format_.low_bit()) {
    // The slot GEMVs' f32 gate|up sums (act and out above hold >= S rows), and, only where
    // the GEMM path cannot decode the blocks itself, one matrix's experts in bf16 (gate|up
    // is the larger): 4.2 GB for gpt-oss-120b.
    const std::int64_t slots = std::min<std::int64_t>(T, moe_gemv_max_) * moe_k_;
    if (slots > 0) moe_gu32_ = DeviceBuffer(slots * 2 * moe_I_ * sizeof(float));
    if (gemm_path && !moe_lowbit_gemm_)
      moe_wscratch_ = DeviceBuffer(moe_E_ * bf16_bytes(2 * moe_I_ * H_));
  }
  moe_host_starts_ = PinnedBuffer((moe_E_ + 1) * sizeof(std::int32_t));
  moe_counter_ = DeviceBuffer(sizeof(unsigned));
  KEEL_CUDA_CHECK(cudaMemsetAsync(moe_counter_.data(), 0, moe_counter_.bytes(),
                                  ctx_.compute().get("cuda runner: moe counter")));
  // The fused decode path runs a MoE layer on k_moe_decode.h's kernels: softmax top-k
  // routing without a router bias, no shared expert. Other models decode unfused.
  // Its kernels read bf16 experts only.
  // Its row limit (kMoeDecodeMaxT) is below the dense fused GEMV's: steps of more rows run
  // unfused rather than every step losing the fused path.
  auto moe_rows_fit = [&](int rows) {
    return moe_decode_supported(rows, static_cast<int>(H_), static_cast<int>(moe_E_),
                                static_cast<int>(moe_k_), static_cast<int>(moe_I_));
  };
  const bool fused_moe = !expert_format_.low_bit() && m.scoring == MoeConfig::Scoring::kSoftmax &&
                         !m.router_bias && m.shared_intermediate == 0 && moe_rows_fit(1);
  if (!fused_moe) fused_max_m_ = 0;
  while (fused_max_m_ > 0 && !moe_rows_fit(fused_max_m_)) --fused_max_m_;
  allocate_moe_shared_buffers();  // GLM-4.5's shared expert (cuda_runner_moe_route.cpp)
}

MoeExpertAct CudaModelRunner::expert_act(const Layer &L) const {
  MoeExpertAct a;
  a.gate_up_bias = L.experts_gate_up_bias.bytes() ? L.experts_gate_up_bias.as<float>() : nullptr;
  a.down_bias = L.experts_down_bias.bytes() ? L.experts_down_bias.as<float>() : nullptr;
  const MoeConfig &m = *config_.moe;
  if (m.swiglu_limit) {
    a.limit = static_cast<float>(*m.swiglu_limit);
    a.alpha = static_cast<float>(m.swiglu_alpha);
  }
  return a;
}

void CudaModelRunner::launch_moe_decode(const Layer &L, std::int32_t T) {
  MoeDecodeParams p;
  p.T = T;
  p.H = static_cast<int>(H_);
  p.E = static_cast<int>(moe_E_);
  p.k = static_cast<int>(moe_k_);
  p.I = static_cast<int>(moe_I_);
  p.residual = residual_.as<float>();
  p.norm_weight = L.post_norm.as<bf16>();
  p.eps = static_cast<float>(config_.rms_norm_eps);
  p.router = L.router.as<bf16>();
  p.norm_topk_prob = config_.moe->norm_topk_prob;
  p.gate_up = L.experts_gate_up.as<bf16>();
  p.down = L.experts_down.as<bf16>();
  p.act_fn = expert_act(L);
  p.normed = normed_.as<bf16>();
  p.logits = moe_logits_.as<float>();
  p.ids = moe_ids_.as<std::int32_t>();
  p.weights = moe_weights_.as<float>();
  p.act = moe_act_.as<bf16>();
  p.counter = moe_counter_.as<unsigned>();
  p.pdl = pdl_;
  const StreamRef s = ctx_.compute();
  launch_moe_decode_router(s, p);
  profiler_.mark(s, StepProfiler::kOther);
  launch_moe_decode_gate_up(s, p);
  launch_moe_decode_down(s, p);
  profiler_.mark(s, StepProfiler::kGemm);
}

int CudaModelRunner::gemm_tile_rows(std::int64_t S) const {
  if (!moe_grouped_) return kGemmAlign;
  return moe_gemm_rows_ > 0 ? moe_gemm_rows_ : moe_gemm_tile_rows(S, moe_E_);
}

std::int64_t CudaModelRunner::gemm_rows_cap(std::int64_t S) const {
  if (!moe_grouped_) return moe_rows_cap(S, moe_E_, kGemmAlign);
  // The grouped GEMM's tiles: groups padded to the row tile, whole tiles only. The tile
  // grows with S, so the largest step's rows bound every step's (the buffers' size).
  return moe_gemm_rows_cap(S, moe_E_, gemm_tile_rows(S));
}

void CudaModelRunner::launch_moe(const Layer &L, std::int32_t T) {
  const StreamRef s = ctx_.compute();
  const int E = static_cast<int>(moe_E_), k = static_cast<int>(moe_k_),
            Ie = static_cast<int>(moe_I_), H = static_cast<int>(H_);
  const bool gemv = moe_gemv_path(T);
  const int S = T * k, align = gemv ? 1 : gemm_tile_rows(S);
  const MoeGroupLayout layout{E, S, gemv ? moe_rows_cap(S, E, 1) : gemm_rows_cap(S)};
  const bf16 *normed = normed_.as<bf16>();
  auto *group = moe_group_.as<std::int32_t>();
  auto *ids = moe_ids_.as<std::int32_t>();
  auto *weights = moe_weights_.as<float>();

  // Router logits in f32: the top-k choice is as sensitive as the CPU's to rounding.
  const LinearLayout router_fmt{moe_E_, H_, {}, {}, {}};
  run_linear(gemm_, s, router_fmt, L.router.data(), normed, moe_logits_.data(), true, T, nullptr);
  launch_moe_router(L, T, moe_logits_.as<float>(), ids, weights);  // cuda_runner_moe_route.cpp
  const MoeExpertAct ea = expert_act(L);
  if (gemv && expert_format_.low_bit()) {  // slot-ordered: no grouping
    profiler_.mark(s, StepProfiler::kOther);
    launch_moe_lowbit_slots(L, T, ea);
    return;
  }
  launch_moe_group(s, ids, S, E, k, align, layout.rows_cap, group);
  profiler_.mark(s, StepProfiler::kOther);

  bf16 *act = moe_act_.as<bf16>(), *out = moe_out_.as<bf16>();
  // The experts' bf16 weights: as stored, or (low-bit) this step's nonempty experts of one
  // matrix dequantized into moe_wscratch_, indexed by expert like the stored tensor. The
  // down matrix reuses the scratch once the gate|up GEMM before it (same stream) has read it.
  const int max_active = std::min(E, S);
  auto bf16_weights = [&](bool down) -> const bf16 * {
    const StackedExperts W = layer_experts(L, down);
    if (!expert_format_.low_bit()) return static_cast<const bf16 *>(W.parts[0].data);
    bf16 *dq = moe_wscratch_.as<bf16>();
    launch_expert_dequantize(s, W, group + layout.active(), group + layout.n_active(), max_active,
                             dq);
    return dq;
  };
  if (gemv) {
    launch_moe_gate_up_gemv(s, normed, L.experts_gate_up.as<bf16>(), H, Ie, group, layout,
                            max_active, act, ea);
    launch_moe_down_gemv(s, act, L.experts_down.as<bf16>(), H, Ie, group, layout, max_active, out);
  } else if (moe_grouped_) {
    // One launch per matrix over every expert's rows, sized on the device.
    bf16 *xg = moe_xg_.as<bf16>(), *gu = moe_gu_.as<bf16>();
    launch_moe_gather(s, normed, H, group, layout, xg);
    if (moe_lowbit_gemm_) {  // the blocks decoded in shared memory: no bf16 copy
      launch_moe_grouped_gemm_lowbit(s, xg, grouped_lowbit_weights(layer_experts(L, false)), 2 * Ie,
                                     H, group, layout, gu, align);
      launch_moe_act(s, gu, Ie, group, layout, ea, act);
      launch_moe_grouped_gemm_lowbit(s, act, grouped_lowbit_weights(layer_experts(L, true)), H, Ie,
                                     group, layout, out, align);
    } else {
      launch_moe_grouped_gemm(s, xg, bf16_weights(false), 2 * Ie, H, group, layout, gu, align);
      launch_moe_act(s, gu, Ie, group, layout, ea, act);
      launch_moe_grouped_gemm(s, act, bf16_weights(true), H, Ie, group, layout, out, align);
    }
  } else {
    launch_moe_gather(s, normed, H, group, layout, moe_xg_.as<bf16>());
    // The GEMMs' sizes come from the group starts: read them on the host (the d2h stream
    // after an event on compute, a bounded wait), then launch one GEMM per nonempty expert.
    moe_starts_ready_.record(s);
    moe_starts_ready_.make_wait(ctx_.copy_d2h());
    KEEL_CUDA_CHECK(cudaMemcpyAsync(moe_host_starts_.data(), group + layout.starts(),
                                    (E + 1) * sizeof(std::int32_t), cudaMemcpyDeviceToHost,
                                    ctx_.copy_d2h().get("cudaMemcpyAsync")));
    moe_starts_ready_.record(ctx_.copy_d2h());
    moe_starts_ready_.wait(ctx_.wait_timeout(), "cuda runner: moe group starts");
    const auto *starts = static_cast<const std::int32_t *>(moe_host_starts_.data());
    if (starts[E] > layout.rows_cap || starts[0] != 0)
      throw Error(ErrorCode::kInternal, "cuda runner: moe groups out of range");
    const bf16 *xg = moe_xg_.as<bf16>();
    bf16 *gu = moe_gu_.as<bf16>();
    const bf16 *wgu = bf16_weights(false);
    for (int e = 0; e < E; ++e) {
      const std::int64_t r0 = starts[e], M = starts[e + 1] - starts[e];
      if (M == 0) continue;
      gemm_.run(s, GemmType::kBF16, GemmType::kBF16, xg + r0 * H,
                wgu + std::int64_t(e) * 2 * Ie * H, gu + r0 * 2 * Ie, M, 2 * Ie, H);
    }
    profiler_.mark(s, StepProfiler::kGemm);
    if (ea.gate_up_bias || ea.limit > 0.0f)
      launch_moe_act(s, gu, Ie, group, layout, ea, act);
    else
      launch_swiglu(s, gu, act, starts[E], Ie);
    const bf16 *wd = bf16_weights(true);
    for (int e = 0; e < E; ++e) {
      const std::int64_t r0 = starts[e], M = starts[e + 1] - starts[e];
      if (M == 0) continue;
      gemm_.run(s, GemmType::kBF16, GemmType::kBF16, act + r0 * Ie, wd + std::int64_t(e) * H * Ie,
                out + r0 * H, M, H, Ie);
    }
  }
  profiler_.mark(s, StepProfiler::kGemm);
  launch_moe_combine(s, out, ids, weights, T, k, H, group, layout, proj_.as<bf16>(), ea.down_bias);
  profiler_.mark(s, StepProfiler::kOther);
}

StackedExperts CudaModelRunner::layer_experts(const Layer &L, bool down) const {
  return down ? expert_format_.down(L.experts_down.data())
              : expert_format_.gate_up(L.experts_gate_up.data());
}

void CudaModelRunner::launch_moe_lowbit_slots(const Layer &L, std::int32_t T,
                                              const MoeExpertAct &ea) {
  const StreamRef s = ctx_.compute();
  const int E = static_cast<int>(moe_E_), k = static_cast<int>(moe_k_),
            Ie = static_cast<int>(moe_I_), H = static_cast<int>(H_), S = T * k;
  const auto *ids = moe_ids_.as<std::int32_t>();
  float *gu = moe_gu32_.as<float>();
  bf16 *act = moe_act_.as<bf16>(), *out = moe_out_.as<bf16>();
  // Slot t k + j: token t's j-th expert. gate|up rows of expert ids[slot] against x[t], f32
  // sums so the activation sees them unrounded (as the bf16 gather-GEMV's epilogue does);
  // then the down rows against the slot's activation, bf16 like the bf16 path's output.
  launch_expert_slot_gemv(s, layer_experts(L, false), normed_.as<bf16>(), H, k, ids, S, gu, true,
                          2 * Ie, moe_gguf_qgemv_ ? &qgemv_choice_ : nullptr);
  launch_moe_slot_act(s, gu, Ie, ids, S, ea, act);
  launch_expert_slot_gemv(s, layer_experts(L, true), act, Ie, 1, ids, S, out, false, H,
                          moe_gguf_qgemv_ ? &qgemv_choice_ : nullptr);
  profiler_.mark(s, StepProfiler::kGemm);
  launch_moe_combine(s, out, ids, moe_weights_.as<float>(), T, k, H, nullptr,
                     MoeGroupLayout{E, S, S}, proj_.as<bf16>(), ea.down_bias);
  profiler_.mark(s, StepProfiler::kOther);
}

}  // namespace keel::cuda
