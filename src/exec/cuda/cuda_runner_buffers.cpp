// CudaModelRunner's buffer plan: every activation, staging and output buffer sized for
// the runner's limits (max_batch_tokens, max_seqs, max_logits_rows, max_model_len), the
// attention path the model's shape allows, and the KV pool sized from what the device
// has left. All of it is allocated here, once: the hot path never allocates.
#include <algorithm>
#include <string>

#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/cuda_runner_detail.h"
#include "exec/cuda/fused_linear.h"
#include "exec/cuda/k_decode_fused.h"

namespace keel::cuda {

using runner_detail::bf16_bytes;
using runner_detail::device_memory;

namespace {
// The steps launch_fused_layers (cuda_runner_fused.cpp) implements.
bool fused_path_runs(arch::LayerStep step) {
  using S = arch::LayerStep;
  switch (step) {
    case S::kInputNorm:
    case S::kQkvProj:
    case S::kQkvBias:
    case S::kQkNorm:
    case S::kRope:
    case S::kKvWrite:
    case S::kAttention:
    case S::kOProj:
    case S::kResidualAdd:
    case S::kPostNorm:
    case S::kGateUpProj:
    case S::kSwiglu:
    case S::kDownProj:
    case S::kMoeFfn:  // launch_moe_decode, where allocate_moe_buffers finds it supported
      return true;
    case S::kOBias:
      return false;
  }
  return false;
}
}  // namespace

void CudaModelRunner::allocate_buffers(const CudaRunnerOptions &opts) {
  if (opts.block_size <= 0 || opts.max_batch_tokens <= 0 || opts.max_seqs <= 0 ||
      opts.max_logits_rows <= 0)
    throw Error(ErrorCode::kInvalidArgument, "cuda runner: options must be positive");
  max_tokens_ = opts.max_batch_tokens;
  graphs_enabled_ = opts.cuda_graphs;
  max_seqs_ = opts.max_seqs;
  max_rows_ = opts.max_logits_rows;
  max_model_len_ = opts.max_model_len > 0 ? opts.max_model_len
                                          : static_cast<std::int32_t>(std::min<std::int64_t>(
                                                config_.max_position_embeddings, 131072));
  const std::int32_t blocks_per_seq = (max_model_len_ + opts.block_size - 1) / opts.block_size;
  max_table_ = max_seqs_ * blocks_per_seq;
  const std::int64_t G = nh_ / nkv_;
  tile_q_ = static_cast<std::int32_t>(std::max<std::int64_t>(1, kAttnMaxRows / G));
  flash_ = !mla_ && opts.flash_attention &&
           flash_attention_supported(static_cast<int>(nh_), static_cast<int>(nkv_),
                                     static_cast<int>(hd_));
  flash_tile_q_ = static_cast<std::int32_t>(std::max<std::int64_t>(1, kFlashRows / G));
  gemm_.set_gemv_max_m(opts.kernels.gemv_max_m);
  qgemv_choice_ = {opts.kernels.qgemv_mma_min_m, opts.kernels.qgemv_stream_stages};
  gemm_.set_qgemv_choice(qgemv_choice_);
  gemm_.set_qgemm_max_m(opts.kernels.qgemm_max_m);
  gemm_.set_qgemm_bf16(opts.kernels.qgemm_bf16);
  // The fused path stages M rows of H bf16 in shared memory (and of nh hd and I on the CUDA
  // cores).
  fused_max_m_ = std::clamp(opts.kernels.fused_decode_max_m, 0, kFusedGemvMaxM);
  fused_mma_ = opts.kernels.fused_gemv_mma;
  fused_waves_ = std::max(0, opts.kernels.fused_gemv_waves);
  // Every step of today's plans has a fused kernel; a plan with other steps (a
  // mixture-of-experts block) runs unfused until the fused path learns them.
  for (const arch::LayerPlan &p : plans_)
    for (const arch::LayerStep step : p.steps)
      if (!fused_path_runs(step)) fused_max_m_ = 0;
  // Nor does its qkv_rope_kv know a partial rotary factor or attention sinks.
  if (rot_dim_ != hd_ || config_.attention_sinks) fused_max_m_ = 0;
  if (mla_) fused_max_m_ = 0;  // no fused latent attention yet: MLA steps run unfused
  const std::size_t smem = ctx_.features().smem_per_block;
  // qkv, gate_up and the LM head read a normed (staged) input; o_proj and down a bf16 one.
  while (fused_max_m_ > 0 && !(fused_gemv_supported(fused_max_m_, H_, smem) &&
                               fused_gemv_supported(fused_max_m_, nh_ * hd_, smem, GemvIn::kBf16) &&
                               fused_gemv_supported(fused_max_m_, I_, smem, GemvIn::kBf16)))
    --fused_max_m_;
  // Quantized linear weights: GGUF blocks run the fused steps on the integer-dot GEMV
  // (fused_linear.h) where every weight's layout allows it at the step's rows; FP8 and
  // MXFP4 ones (whose GEMVs have no fused prologue) leave those steps unfused. Steps past
  // the GEMVs' rows dequantize each weight into one scratch buffer, which also holds the
  // quantized GEMM's int8 input (run_linear_scratch_bytes).
  std::size_t scratch = 0;
  const int gemm_rows = gemm_.qgemm_max_m();
  for (const auto &l : layers_)
    for (const LinearLayout *f : {&l.qkv_fmt, &l.o_fmt, &l.gate_up_fmt, &l.down_fmt})
      if (f->quantized()) scratch = std::max(scratch, run_linear_scratch_bytes(*f, gemm_rows));
  if (lm_head_fmt_.quantized())
    scratch = std::max(scratch, run_linear_scratch_bytes(lm_head_fmt_, gemm_rows));
  if (scratch > 0) {
    auto fused_runs = [&](int M) {
      bool ok = fused_linear_supported(lm_head_fmt_, M, GemvOut::kF32, smem);
      for (std::size_t li = 0; li < layers_.size() && ok; ++li) {
        const Layer &l = layers_[li];
        ok = fused_linear_supported(l.qkv_fmt, M, GemvOut::kBf16, smem) &&
             fused_linear_supported(l.o_fmt, M, GemvOut::kAddResidual, smem);
        if (ok && plans_[li].has(arch::LayerStep::kSwiglu))  // a dense MLP, not experts
          ok = fused_linear_supported(l.gate_up_fmt, M, GemvOut::kSwiglu, smem) &&
               fused_linear_supported(l.down_fmt, M, GemvOut::kAddResidual, smem);
      }
      return ok;
    };
    while (fused_max_m_ > 0 && !fused_runs(fused_max_m_)) --fused_max_m_;
    dequant_scratch_ = DeviceBuffer(scratch);
  }
  pdl_ = opts.programmatic_launch && ctx_.features().programmatic_launch;  // sm_90+
  split_cap_ = std::max(0, opts.kernels.attn_split_cap);
  partial_entries_ = 8 * ctx_.num_sms();

  const std::size_t T = max_tokens_;
  // [tokens][positions][slots][rows][tiles][block table], then MLA's chunk tiles
  // (StepShape::mla_chunk_tiles_at).
  const std::size_t in_ints = 3 * T + max_rows_ + 4 * T + max_table_ + (config_.mla ? 4 * T : 0);
  host_in_ = PinnedBuffer(in_ints * sizeof(std::int32_t));
  dev_in_ = DeviceBuffer(in_ints * sizeof(std::int32_t));
  residual_ = DeviceBuffer(T * H_ * sizeof(float));
  normed_ = DeviceBuffer(T * bf16_bytes(H_));
  qkv_ = DeviceBuffer(T * bf16_bytes(qkv_width_));
  attn_ = DeviceBuffer(T * bf16_bytes(nh_ * hd_));
  proj_ = DeviceBuffer(T * bf16_bytes(H_));
  // The dense MLP's activations; a model whose every layer is a mixture of experts has
  // none (its experts' scratch is allocate_moe_buffers').
  bool dense_mlp = false;
  for (const arch::LayerPlan &p : plans_) dense_mlp = dense_mlp || p.has(arch::LayerStep::kSwiglu);
  gate_up_ = DeviceBuffer(dense_mlp ? T * bf16_bytes(2 * I_) : 0);
  act_ = DeviceBuffer(dense_mlp ? T * bf16_bytes(I_) : 0);
  allocate_moe_buffers(opts);
  if (mla_) allocate_mla_buffers(opts);
  if (mla_ && config_.mla->dsa()) allocate_dsa_buffers(opts);
  partial_o_ =
      DeviceBuffer(static_cast<std::size_t>(partial_entries_) * kAttnMaxRows * hd_ * sizeof(float));
  partial_ml_ =
      DeviceBuffer(static_cast<std::size_t>(partial_entries_) * kAttnMaxRows * 2 * sizeof(float));
  split_counters_ = DeviceBuffer(static_cast<std::size_t>(partial_entries_) * sizeof(unsigned));
  KEEL_CUDA_CHECK(cudaMemsetAsync(split_counters_.data(), 0, split_counters_.bytes(),
                                  ctx_.compute().get("cuda runner: split counters")));
  rows_in_ = DeviceBuffer(max_rows_ * bf16_bytes(H_));
  logits_ = DeviceBuffer(static_cast<std::size_t>(max_rows_) * V_ * sizeof(float));
  argmax_ = DeviceBuffer(max_rows_ * sizeof(std::int32_t));
  argmax_scratch_ = DeviceBuffer(argmax_scratch_bytes(max_rows_));
  host_logits_ = PinnedBuffer(static_cast<std::size_t>(max_rows_) * V_ * sizeof(float));
  host_tokens_ = PinnedBuffer(max_rows_ * sizeof(std::int32_t));
  if (opts.gpu_sampling) {
    sample_scratch_ = DeviceBuffer(sample_scratch_bytes(max_rows_, static_cast<int>(V_)));
    penalty_cap_ =
        std::min<std::int64_t>(std::int64_t(max_rows_) * std::min<std::int64_t>(V_, max_model_len_),
                               std::int64_t(1) << 22);
    const std::size_t in_bytes =
        max_rows_ * sizeof(SampleRow) + penalty_cap_ * sizeof(PenaltyEntry);
    sample_in_ = DeviceBuffer(in_bytes);
    host_sample_in_ = PinnedBuffer(in_bytes);
    sample_out_ = DeviceBuffer(max_rows_ * 8);
    host_sample_out_ = PinnedBuffer(max_rows_ * 8);
    const std::size_t mask_bytes = max_rows_ * (4 + (V_ + 31) / 32 * 4);
    mask_in_ = DeviceBuffer(mask_bytes);
    host_mask_in_ = PinnedBuffer(mask_bytes);
  }

  // A latent cache (MLA) holds one row of kv_values_per_token_layer values a token and layer.
  const KvLayout layout = mla_ ? mla_kv_layout(opts.block_size)
                               : KvLayout{static_cast<int>(config_.num_layers), opts.block_size,
                                          static_cast<int>(nkv_), static_cast<int>(hd_)};
  std::int32_t blocks = opts.num_kv_blocks;
  DeviceMemory mem = device_memory();
  mem.free_at_open = free_at_open_;
  device_total_ = mem.total;
  buffer_bytes_ = std::max<std::int64_t>(mem.free_at_open - mem.free_now, 0);
  if (blocks <= 0 && opts.kv_blocks_for) {
    blocks = opts.kv_blocks_for(mem, static_cast<std::int64_t>(layout.block_elems()) *
                                         static_cast<std::int64_t>(sizeof(bf16)));
  } else if (blocks <= 0) {
    std::size_t free_b = 0, total_b = 0;
    KEEL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const double budget = static_cast<double>(free_b) * opts.kv_memory_fraction;
    blocks = static_cast<std::int32_t>(std::min<double>(
        budget / (static_cast<double>(layout.block_elems()) * sizeof(bf16)), 1 << 30));
    if (blocks <= 0)
      throw Error(ErrorCode::kResourceExhausted,
                  "cuda runner: no device memory left for the KV cache");
  }
  kv_ = std::make_unique<CudaKvStore>(ctx_, layout, blocks);
  decode_kernel_ =
      !mla_ && decode_attention_supported(static_cast<int>(nh_), static_cast<int>(nkv_),
                                          static_cast<int>(hd_));
  attn_path_.decode_kernel = decode_kernel_;
  attn_path_.flash = flash_;
  attn_path_.tile_q = tile_q_;
  attn_path_.flash_tile_q = flash_tile_q_;
  attn_path_.num_sms = ctx_.num_sms();
  attn_path_.partial_entries = partial_entries_;
  attn_path_.split_cap = split_cap_;
  attn_path_.num_kv_heads = nkv_;
  // Split-K per window: the widest for most layers, the narrowest (gpt-oss's sliding
  // layers) its own factor; a layer of a window in between would take the widest's
  // splits, some left empty, which the kernels allow.
  std::int64_t widest = layer_window(0), narrowest = layer_window(0);
  for (std::int64_t l = 0; l < config_.num_layers; ++l) {
    const std::int64_t w = layer_window(l);
    widest = (w == 0 || widest == 0) ? 0 : std::max(widest, w);
    narrowest = (narrowest == 0) ? w : (w == 0 ? narrowest : std::min(narrowest, w));
  }
  attn_path_.window = widest;
  attn_path_.narrow_window = narrowest != widest ? narrowest : 0;
  // A mark at most per step; plus the start and 3 for the LM head.
  if (opts.profile) {
    std::size_t marks = 4;
    for (const arch::LayerPlan &p : plans_) marks += p.steps.size() + 3;  // moe_ffn: 4
    if (mla_ && config_.mla->dsa()) marks += 2 * plans_.size();  // the indexer's GEMMs, select
    profiler_ = StepProfiler(marks);
  }
}

}  // namespace keel::cuda
