#include "exec/cuda/cuda_model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/half.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/k_decode_fused.h"
#include "exec/cuda/k_fill.h"
#include "exec/cuda/rope_table.h"
#include "formats/model_weights.h"
#include "formats/quant.h"

namespace keel::cuda {

namespace {
bool is_block_quantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ6_K;
}

std::string layer_name(std::int64_t i, const char *rest) {
  return "model.layers." + std::to_string(i) + "." + rest;
}

Error bad_batch(const std::string &why) {
  return Error(ErrorCode::kInvalidArgument, "forward batch: " + why);
}

// The current device's memory (cudaMemGetInfo); free_at_open left 0.
DeviceMemory device_memory() {
  std::size_t free_b = 0, total_b = 0;
  KEEL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  DeviceMemory m;
  m.total = static_cast<std::int64_t>(total_b);
  m.free_now = static_cast<std::int64_t>(free_b);
  return m;
}

// Byte offset of element `elems` in a bf16 matrix.
std::size_t bf16_bytes(std::int64_t elems) {
  return static_cast<std::size_t>(elems) * sizeof(bf16);
}
}  // namespace

CudaModelRunner::CudaModelRunner(CudaContext &ctx, ModelConfig config, const WeightSource &weights,
                                 const CudaRunnerOptions &opts)
    : ctx_(ctx), config_(std::move(config)), gemm_(ctx) {
  ctx_.check_owner("CudaModelRunner");
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
  allocate_weights();
  randomize_weights(seed);
  allocate_buffers(opts);
}

std::unique_ptr<CudaModelRunner> CudaModelRunner::open(const std::filesystem::path &path,
                                                       CudaContext &ctx,
                                                       const CudaRunnerOptions &opts) {
  const auto weights = ModelWeights::open(path);
  return std::make_unique<CudaModelRunner>(
      ctx, weights->config(), [&](const std::string &name) { return weights->get(name); }, opts);
}

CudaModelRunner::~CudaModelRunner() {
  // Buffers must not be freed under running kernels; shutdown may wait (unbounded by design:
  // a wedged engine is killed by its supervisor, not joined).
  cudaSetDevice(ctx_.device());
  cudaStreamSynchronize(ctx_.compute());
  cudaStreamSynchronize(ctx_.copy_h2d());
  cudaStreamSynchronize(ctx_.copy_d2h());
}

void CudaModelRunner::validate_config() const {
  const auto &c = config_;
  auto fail = [](const std::string &why) {
    throw Error(ErrorCode::kUnsupported, "cuda runner: " + why);
  };
  if (c.hidden_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
      c.vocab_size <= 0 || c.intermediate_size <= 0 || c.head_dim <= 0)
    throw Error(ErrorCode::kFormat, "cuda runner: config has a non-positive dimension");
  if (c.num_heads % c.num_kv_heads != 0)
    throw Error(ErrorCode::kFormat, "cuda runner: num_heads % num_kv_heads != 0");
  if (c.head_dim > kAttnMaxHeadDim || c.head_dim % 8 != 0)
    fail("head_dim " + std::to_string(c.head_dim));
  if (c.num_heads / c.num_kv_heads > kAttnMaxRows) fail("more than 32 query heads per kv head");
  if (c.hidden_size % 8 != 0) fail("hidden_size must be a multiple of 8");
  if (c.vocab_size > (1ll << 31) - 1 || c.hidden_size > (1 << 20) ||
      c.intermediate_size > (1 << 22))
    fail("dimensions beyond the int32 launch range");
}

void CudaModelRunner::allocate_weights() {
  const auto &c = config_;
  H_ = c.hidden_size;
  I_ = c.intermediate_size;
  nh_ = c.num_heads;
  nkv_ = c.num_kv_heads;
  hd_ = c.head_dim;
  V_ = c.vocab_size;
  qkv_width_ = (nh_ + 2 * nkv_) * hd_;
  auto alloc = [&](std::int64_t elems) {
    weight_bytes_ += bf16_bytes(elems);
    return DeviceBuffer(bf16_bytes(elems));
  };
  // Linear weights: their planned device format (plan_weight_formats; bf16 if unplanned).
  auto alloc_linear = [&](LinearLayout &f, std::int64_t N, std::int64_t K) {
    if (!f.quantized()) {
      f.N = N;
      f.K = K;
      return alloc(N * K);
    }
    weight_bytes_ += f.bytes();
    return DeviceBuffer(f.bytes());
  };
  embed_ = alloc(V_ * H_);
  if (!c.tie_word_embeddings) lm_head_ = alloc_linear(lm_head_fmt_, V_, H_);
  if (c.tie_word_embeddings) lm_head_fmt_ = LinearLayout{V_, H_, {}, {}};
  final_norm_ = alloc(H_);
  layers_.resize(c.num_layers);
  for (auto &l : layers_) {
    l.input_norm = alloc(H_);
    l.qkv = alloc_linear(l.qkv_fmt, qkv_width_, H_);
    if (c.attention_bias) l.qkv_bias = alloc(qkv_width_);
    if (c.qk_norm) {
      l.q_norm = alloc(hd_);
      l.k_norm = alloc(hd_);
    }
    l.o = alloc_linear(l.o_fmt, H_, nh_ * hd_);
    l.post_norm = alloc(H_);
    l.gate_up = alloc_linear(l.gate_up_fmt, 2 * I_, H_);
    l.down = alloc_linear(l.down_fmt, H_, I_);
  }
  const RopeTable rope = make_rope_table(c);
  inv_freq_ = DeviceBuffer(rope.inv_freq.size() * sizeof(float));
  rope_mscale_ = rope.mscale;
  KEEL_CUDA_CHECK(cudaMemcpyAsync(inv_freq_.data(), rope.inv_freq.data(), inv_freq_.bytes(),
                                  cudaMemcpyHostToDevice, ctx_.copy_h2d()));
  Event done;
  done.record(ctx_.copy_h2d());
  done.wait(ctx_.wait_timeout(), "cuda runner: rope table upload");
}

void CudaModelRunner::upload_weights(const WeightSource &weights) {
  std::vector<std::uint16_t> converted;
  Event done;
  // Copies tensor `name` (expected shape [rows, cols]) to dst + byte offset, as bf16.
  auto put = [&](const std::string &name, std::int64_t rows, std::int64_t cols,
                 const DeviceBuffer &dst, std::size_t offset, const LinearLayout *fmt = nullptr,
                 int part = 0) {
    const TensorView t = weights(name);
    const bool shape_ok = (cols == 0)
                              ? (t.shape.size() == 1 && t.shape[0] == rows)
                              : (t.shape.size() == 2 && t.shape[0] == rows && t.shape[1] == cols);
    const std::int64_t n = rows * std::max<std::int64_t>(cols, 1);
    if (!shape_ok)
      throw Error(ErrorCode::kFormat, "weights: " + name + ": unexpected shape for this config");
    if (t.data == nullptr || t.nbytes < static_cast<std::size_t>(dtype_bytes(t.dtype, n)))
      throw Error(ErrorCode::kFormat, "weights: " + name + ": data shorter than its shape");
    const void *src = t.data;
    if (fmt && fmt->quantized()) {
      // Kept in the file's block format (plan_weight_formats): the bytes as stored.
      KEEL_CUDA_CHECK(cudaMemcpyAsync(dst.as<std::byte>() + fmt->part_offsets[part], t.data,
                                      dtype_bytes(t.dtype, n), cudaMemcpyHostToDevice,
                                      ctx_.copy_h2d()));
      done.record(ctx_.copy_h2d());
      done.wait(ctx_.wait_timeout(), "cuda runner: weight upload");
      return;
    }
    if (is_block_quantized(t.dtype)) {
      // GGUF Q8_0 / Q4_0 / Q4_K / Q6_K: dequantized to bf16 at load (first step; the
      // device then holds bf16, so decode reads 2 bytes per weight rather than ~1).
      const std::int64_t row = std::max<std::int64_t>(cols, 1);
      if (row % dtype_info(t.dtype).block_elems != 0)
        throw Error(ErrorCode::kFormat, "weights: " + name + ": rows not a multiple of the " +
                                            std::string(dtype_name(t.dtype)) + " block");
      converted.resize(n);
      std::vector<float> chunk;
      const std::int64_t rows_per_chunk = std::max<std::int64_t>(1, (1 << 20) / row);
      const std::int64_t row_bytes = dtype_bytes(t.dtype, row);
      for (std::int64_t r0 = 0; r0 < n / row; r0 += rows_per_chunk) {
        const std::int64_t nr = std::min(rows_per_chunk, n / row - r0);
        chunk.resize(nr * row);
        dequantize_row(t.dtype, t.data + r0 * row_bytes, chunk.data(), nr * row);
        for (std::int64_t i = 0; i < nr * row; ++i) converted[r0 * row + i] = f32_to_bf16(chunk[i]);
      }
      src = converted.data();
    } else if (t.dtype == DType::kF32 || t.dtype == DType::kF16) {
      converted.resize(n);
      for (std::int64_t i = 0; i < n; ++i) {
        float f;
        if (t.dtype == DType::kF32) {
          std::memcpy(&f, t.data + i * 4, 4);
        } else {
          std::uint16_t h;
          std::memcpy(&h, t.data + i * 2, 2);
          f = f16_to_f32(h);
        }
        converted[i] = f32_to_bf16(f);
      }
      src = converted.data();
    } else if (t.dtype != DType::kBF16) {
      throw Error(ErrorCode::kUnsupported, "weights: " + name + ": dtype " +
                                               std::string(dtype_name(t.dtype)) +
                                               " is not supported by the CUDA runner yet");
    }
    KEEL_CUDA_CHECK(cudaMemcpyAsync(dst.as<std::byte>() + offset, src, bf16_bytes(n),
                                    cudaMemcpyHostToDevice, ctx_.copy_h2d()));
    // `converted` is reused by the next tensor: wait for this copy to have read it.
    done.record(ctx_.copy_h2d());
    done.wait(ctx_.wait_timeout(), "cuda runner: weight upload");
  };
  put("model.embed_tokens.weight", V_, H_, embed_, 0);
  if (!config_.tie_word_embeddings) put("lm_head.weight", V_, H_, lm_head_, 0, &lm_head_fmt_);
  put("model.norm.weight", H_, 0, final_norm_, 0);
  for (std::int64_t i = 0; i < config_.num_layers; ++i) {
    Layer &l = layers_[i];
    put(layer_name(i, "input_layernorm.weight"), H_, 0, l.input_norm, 0);
    put(layer_name(i, "self_attn.q_proj.weight"), nh_ * hd_, H_, l.qkv, 0, &l.qkv_fmt, 0);
    put(layer_name(i, "self_attn.k_proj.weight"), nkv_ * hd_, H_, l.qkv, bf16_bytes(nh_ * hd_ * H_),
        &l.qkv_fmt, 1);
    put(layer_name(i, "self_attn.v_proj.weight"), nkv_ * hd_, H_, l.qkv,
        bf16_bytes((nh_ + nkv_) * hd_ * H_), &l.qkv_fmt, 2);
    if (config_.attention_bias) {
      put(layer_name(i, "self_attn.q_proj.bias"), nh_ * hd_, 0, l.qkv_bias, 0);
      put(layer_name(i, "self_attn.k_proj.bias"), nkv_ * hd_, 0, l.qkv_bias, bf16_bytes(nh_ * hd_));
      put(layer_name(i, "self_attn.v_proj.bias"), nkv_ * hd_, 0, l.qkv_bias,
          bf16_bytes((nh_ + nkv_) * hd_));
    }
    if (config_.qk_norm) {
      put(layer_name(i, "self_attn.q_norm.weight"), hd_, 0, l.q_norm, 0);
      put(layer_name(i, "self_attn.k_norm.weight"), hd_, 0, l.k_norm, 0);
    }
    put(layer_name(i, "self_attn.o_proj.weight"), H_, nh_ * hd_, l.o, 0, &l.o_fmt);
    put(layer_name(i, "post_attention_layernorm.weight"), H_, 0, l.post_norm, 0);
    put(layer_name(i, "mlp.gate_proj.weight"), I_, H_, l.gate_up, 0, &l.gate_up_fmt, 0);
    put(layer_name(i, "mlp.up_proj.weight"), I_, H_, l.gate_up, bf16_bytes(I_ * H_), &l.gate_up_fmt,
        1);
    put(layer_name(i, "mlp.down_proj.weight"), H_, I_, l.down, 0, &l.down_fmt);
  }
}

void CudaModelRunner::randomize_weights(std::uint64_t seed) {
  cudaStream_t s = ctx_.compute();
  std::uint64_t n = 0;
  // Uniform with variance 1/fan_in keeps activations O(1) through the layers.
  auto fill = [&](const DeviceBuffer &b, std::int64_t fan_in) {
    const float a = fan_in > 0 ? std::sqrt(3.0f / static_cast<float>(fan_in)) : 1.0f;
    const float lo = fan_in > 0 ? -a : 1.0f, hi = fan_in > 0 ? a : 1.0f;  // norms: all ones
    launch_fill_uniform(s, b.as<bf16>(), static_cast<std::int64_t>(b.bytes() / sizeof(bf16)),
                        seed + (n++), lo, hi);
  };
  fill(embed_, 1);
  if (lm_head_.bytes()) fill(lm_head_, H_);
  fill(final_norm_, 0);
  for (auto &l : layers_) {
    fill(l.input_norm, 0);
    fill(l.qkv, H_);
    if (l.qkv_bias.bytes()) fill(l.qkv_bias, H_);
    if (l.q_norm.bytes()) fill(l.q_norm, 0);
    if (l.k_norm.bytes()) fill(l.k_norm, 0);
    fill(l.o, nh_ * hd_);
    fill(l.post_norm, 0);
    fill(l.gate_up, H_);
    fill(l.down, I_);
  }
  Event done;
  done.record(s);
  done.wait(ctx_.wait_timeout(), "cuda runner: random weights");
}

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
  flash_ = opts.flash_attention &&
           flash_attention_supported(static_cast<int>(nh_), static_cast<int>(nkv_),
                                     static_cast<int>(hd_));
  flash_tile_q_ = static_cast<std::int32_t>(std::max<std::int64_t>(1, kFlashRows / G));
  flash_decode_ = flash_ && decode_kernel_ && opts.flash_decode;
  attn_kv_heads_fast_ = opts.attn_kv_heads_fast;
  flash_variant_ = opts.flash_variant;
  attn_generic_group_ = opts.attn_decode_generic_group;
  gemm_.set_gemv_max_m(opts.gemv_max_m);
  // The fused path stages M rows of H, nh hd and I bf16 in shared memory.
  fused_max_m_ = std::clamp(opts.fused_decode_max_m, 0, kFusedGemvMaxM);
  while (fused_max_m_ > 0 &&
         !(fused_gemv_supported(fused_max_m_, H_) &&
           fused_gemv_supported(fused_max_m_, nh_ * hd_) && fused_gemv_supported(fused_max_m_, I_)))
    --fused_max_m_;
  // Quantized linear weights: the fused kernels read bf16 only, so those steps take the
  // unfused path; larger steps dequantize each weight into one scratch buffer.
  std::size_t scratch = 0;
  for (const auto &l : layers_)
    for (const LinearLayout *f : {&l.qkv_fmt, &l.o_fmt, &l.gate_up_fmt, &l.down_fmt})
      if (f->quantized()) scratch = std::max(scratch, f->bf16_bytes());
  if (lm_head_fmt_.quantized()) scratch = std::max(scratch, lm_head_fmt_.bf16_bytes());
  if (scratch > 0) {
    fused_max_m_ = 0;
    dequant_scratch_ = DeviceBuffer(scratch);
  }
  pdl_ = opts.programmatic_launch;
  swiglu_epilogue_ = opts.fused_swiglu_epilogue;
  split_cap_ = std::max(0, opts.attn_split_cap);
  l2_prefetch_ = opts.fused_l2_prefetch;
  if (!fused_gemv_split_supported(opts.fused_gemv_split_k))
    throw Error(ErrorCode::kInvalidArgument,
                "cuda runner: fused_gemv_split_k must be 0, 1, 2 or 4");
  split_k_ = opts.fused_gemv_split_k;
  split_round_down_ = opts.attn_splits_round_down;
  attn_merge_in_kernel_ = opts.attn_merge_in_kernel;
  attn_pdl_ = opts.attn_programmatic_launch;
  partial_entries_ = 8 * ctx_.num_sms();

  const std::size_t T = max_tokens_;
  const std::size_t in_ints = 3 * T + max_rows_ + 4 * T + max_table_;
  host_in_ = PinnedBuffer(in_ints * sizeof(std::int32_t));
  dev_in_ = DeviceBuffer(in_ints * sizeof(std::int32_t));
  residual_ = DeviceBuffer(T * H_ * sizeof(float));
  normed_ = DeviceBuffer(T * bf16_bytes(H_));
  qkv_ = DeviceBuffer(T * bf16_bytes(qkv_width_));
  attn_ = DeviceBuffer(T * bf16_bytes(nh_ * hd_));
  proj_ = DeviceBuffer(T * bf16_bytes(H_));
  gate_up_ = DeviceBuffer(T * bf16_bytes(2 * I_));
  act_ = DeviceBuffer(T * bf16_bytes(I_));
  partial_o_ =
      DeviceBuffer(static_cast<std::size_t>(partial_entries_) * kAttnMaxRows * hd_ * sizeof(float));
  partial_ml_ =
      DeviceBuffer(static_cast<std::size_t>(partial_entries_) * kAttnMaxRows * 2 * sizeof(float));
  split_counters_ = DeviceBuffer(static_cast<std::size_t>(partial_entries_) * sizeof(unsigned));
  KEEL_CUDA_CHECK(
      cudaMemsetAsync(split_counters_.data(), 0, split_counters_.bytes(), ctx_.compute()));
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
  }

  KvLayout layout{static_cast<int>(config_.num_layers), opts.block_size, static_cast<int>(nkv_),
                  static_cast<int>(hd_)};
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
  decode_kernel_ = decode_attention_supported(static_cast<int>(nh_), static_cast<int>(nkv_),
                                              static_cast<int>(hd_));
  if (opts.profile) {
    // Per layer: 9 marks; plus the start and 3 for the LM head.
    for (std::int64_t i = 0; i < 9 * config_.num_layers + 4; ++i)
      profile_events_.emplace_back(true);
    profile_phase_.assign(profile_events_.size(), kPhaseOther);
  }
}

void CudaModelRunner::profile_begin(cudaStream_t s) {
  if (profile_events_.empty()) return;
  profile_used_ = 0;
  profile_events_[profile_used_++].record(s);
}

void CudaModelRunner::profile_mark(cudaStream_t s, int phase) {
  if (profile_events_.empty() || profile_used_ >= profile_events_.size()) return;
  profile_phase_[profile_used_] = phase;
  profile_events_[profile_used_++].record(s);
}

void CudaModelRunner::profile_collect() {
  // Called after the step's last event completed.
  for (std::size_t i = 1; i < profile_used_; ++i)
    profile_ms_[profile_phase_[i]] += Event::elapsed_ms(profile_events_[i - 1], profile_events_[i]);
  profile_used_ = 0;
}

int CudaModelRunner::enqueue(const ForwardBatch &b, std::vector<std::int32_t> &row_seq,
                             std::vector<std::int32_t> &row_pos) {
  ctx_.check_owner("CudaModelRunner::forward");
  ctx_.activate();
  const std::int32_t T = b.total_tokens();
  const std::int32_t S = static_cast<std::int32_t>(b.seqs.size());
  const std::int32_t bs = kv_->block_size();
  if (T > max_tokens_)
    throw bad_batch(std::to_string(T) + " tokens exceed max_batch_tokens " +
                    std::to_string(max_tokens_));
  if (S > max_seqs_)
    throw bad_batch(std::to_string(S) + " sequences exceed max_seqs " + std::to_string(max_seqs_));
  if (static_cast<std::int64_t>(b.block_table.size()) > max_table_)
    throw bad_batch("block table too long");
  for (TokenId t : b.tokens)
    if (t < 0 || t >= V_)
      throw bad_batch("token id " + std::to_string(t) + " outside the vocabulary");
  for (std::int32_t blk : b.block_table)
    if (blk < 0 || blk >= kv_->num_blocks())
      throw bad_batch("block id " + std::to_string(blk) + " out of range");

  // Decode-only batches replay a captured graph for their bucket: the batch is padded to
  // Tp tokens (token 0, position 0, slot -1 so nothing is stored, a one-key tile, a row
  // whose logits nobody reads), so every device offset below depends on Tp alone.
  bool graph = graphs_enabled_ && profile_events_.empty() && T > 0 && S == T;
  for (std::int32_t i = 0; graph && i < S; ++i)
    graph = b.seqs[i].num_tokens == 1 && b.seqs[i].token_offset == i &&
            b.seqs[i].logits != SequenceSlice::Logits::kNone;
  const std::int32_t Tp = graph ? graph_bucket(T) : T;

  // Stage: [tokens Tp][positions Tp][slots Tp][rows Rp][tiles 4 x n][block_table].
  if (inputs_pending_) inputs_copied_.wait(ctx_.wait_timeout(), "cuda runner: input staging");
  std::int32_t *h = host_in_.as<std::int32_t>();
  std::int32_t *tokens = h, *positions = h + Tp, *slots = h + 2 * Tp, *rows = h + 3 * Tp;
  std::fill(tokens, tokens + Tp, 0);
  std::fill(positions, positions + Tp, 0);
  std::fill(slots, slots + Tp, -1);  // tokens no sequence claims are computed but never stored
  std::copy(b.tokens.begin(), b.tokens.end(), tokens);
  row_seq.clear();
  row_pos.clear();
  // Single-query tiles (decode steps, a chunk's last odd token) go to the decode kernel,
  // the rest to the general one; each launch gets its own split-K factor.
  // Tiles of several queries go to the tensor-core flash kernel when the shape allows.
  std::vector<AttnTile> tiles, multi_tiles, flash_tiles;
  std::int32_t max_kv_single = 0, max_kv_multi = 0;
  const std::int32_t tq = flash_ ? flash_tile_q_ : tile_q_;
  for (std::int32_t s = 0; s < S; ++s) {
    const SequenceSlice &q = b.seqs[s];
    const std::int64_t end = std::int64_t(q.start_pos) + q.num_tokens;
    if (q.num_tokens < 0 || q.token_offset < 0 || q.start_pos < 0 ||
        std::int64_t(q.token_offset) + q.num_tokens > T)
      throw bad_batch("sequence " + std::to_string(s) + ": tokens out of range");
    if (end > max_model_len_)
      throw bad_batch("sequence " + std::to_string(s) + ": longer than max_model_len");
    if (q.num_blocks < 0 || q.block_offset < 0 ||
        std::int64_t(q.block_offset) + q.num_blocks >
            static_cast<std::int64_t>(b.block_table.size()) ||
        std::int64_t(q.num_blocks) * bs < end)
      throw bad_batch("sequence " + std::to_string(s) +
                      ": block table does not cover its positions");
    for (std::int32_t j = 0; j < q.num_tokens; ++j) {
      const std::int32_t t = q.token_offset + j, pos = q.start_pos + j;
      positions[t] = pos;
      slots[t] = b.block_table[q.block_offset + pos / bs] * bs + pos % bs;
    }
    for (std::int32_t j = 0; j < q.num_tokens; j += tq) {
      AttnTile tile{q.token_offset + j, std::min(tq, q.num_tokens - j), q.start_pos + j,
                    q.block_offset};
      if (tile.num_q > 1 && flash_) {
        flash_tiles.push_back(tile);
        continue;
      }
      for (std::int32_t k = 0; k < tile.num_q; k += tile_q_) {  // general-kernel sized
        const AttnTile sub{tile.q_start + k, std::min(tile_q_, tile.num_q - k), tile.pos0 + k,
                           tile.block_offset};
        auto &kv_max = sub.num_q == 1 && decode_kernel_ ? max_kv_single : max_kv_multi;
        kv_max = std::max<std::int32_t>(kv_max, sub.pos0 + sub.num_q);
        (sub.num_q == 1 && decode_kernel_ ? tiles : multi_tiles).push_back(sub);
      }
    }
    const bool all = q.logits == SequenceSlice::Logits::kAll;
    if (q.num_tokens > 0 && q.logits != SequenceSlice::Logits::kNone)
      for (std::int32_t j = all ? 0 : q.num_tokens - 1; j < q.num_tokens; ++j) {
        if (static_cast<std::int32_t>(row_seq.size()) >= max_rows_)
          throw bad_batch("more than max_logits_rows " + std::to_string(max_rows_) +
                          " logits rows requested");
        rows[row_seq.size()] = q.token_offset + j;
        row_seq.push_back(s);
        row_pos.push_back(q.start_pos + j);
      }
  }
  const int R = static_cast<int>(row_seq.size());
  int Rp = R;
  if (graph) {
    for (std::int32_t i = T; i < Tp; ++i) {
      rows[i] = i;
      (decode_kernel_ ? tiles : multi_tiles).push_back(AttnTile{i, 1, 0, 0});
    }
    Rp = Tp;
  }
  // Many single-query tiles fill the GPU without split-K: then the flash kernel reads
  // their K/V faster (cp.async tiles) than the decode kernel does.
  bool decode_on_flash = false;
  if (flash_decode_ && !tiles.empty() &&
      static_cast<std::int64_t>(tiles.size()) * nkv_ >= 2 * ctx_.num_sms()) {
    flash_tiles.insert(flash_tiles.begin(), tiles.begin(), tiles.end());
    tiles.clear();
    decode_on_flash = true;
  }
  const int n_single = static_cast<int>(tiles.size());
  tiles.insert(tiles.end(), multi_tiles.begin(), multi_tiles.end());
  tiles.insert(tiles.end(), flash_tiles.begin(), flash_tiles.end());
  const std::size_t tiles_at = 3 * std::size_t(Tp) + Rp;
  std::memcpy(h + tiles_at, tiles.data(), tiles.size() * sizeof(AttnTile));
  const std::size_t table_at = tiles_at + 4 * tiles.size();
  std::copy(b.block_table.begin(), b.block_table.end(), h + table_at);
  const std::size_t n_ints = table_at + b.block_table.size();

  cudaStream_t s = ctx_.compute();
  KEEL_CUDA_CHECK(
      cudaMemcpyAsync(dev_in_.data(), h, n_ints * sizeof(std::int32_t), cudaMemcpyHostToDevice, s));
  inputs_copied_.record(s);
  inputs_pending_ = true;

  // Split-K when the grid would leave most SMs idle (decode with few sequences).
  auto splits_for = [&](int n_tiles, std::int32_t max_kv) {
    const std::int64_t work = std::int64_t(n_tiles) * nkv_;
    if (work <= 0 || work >= 2 * ctx_.num_sms()) return 1;
    std::int64_t sp =
        std::min<std::int64_t>((2 * ctx_.num_sms() + work - 1) / work, (max_kv + 63) / 64);
    if (graph) {  // a power of two, so few graphs cover all context lengths
      std::int64_t p2 = 1;
      while (p2 < sp) p2 *= 2;
      // Rounding down keeps at least half the blocks that fill the GPU twice over; up
      // (as before) doubled them: 8B batch 1 at ~576 keys 16 splits 202 tok/s, 8 210.
      if (split_round_down_ && p2 > sp) p2 /= 2;
      sp = p2;
      while (sp > 1 && sp * work > partial_entries_) sp /= 2;
    }
    if (split_cap_ > 0) sp = std::min<std::int64_t>(sp, split_cap_);
    return static_cast<int>(
        std::max<std::int64_t>(1, std::min<std::int64_t>(sp, partial_entries_ / work)));
  };
  StepShape shape;
  shape.T = Tp;
  shape.R = Rp;
  shape.n_single = n_single;
  shape.n_multi = static_cast<int>(multi_tiles.size());
  shape.n_flash = static_cast<int>(flash_tiles.size());
  shape.tiles_at = tiles_at;
  shape.table_at = table_at;
  // With a sliding window a tile of q queries sees at most window + q - 1 keys: split
  // only those (the kernels start each tile at its first visible key).
  const std::int64_t window = config_.sliding_window.value_or(0);
  auto visible = [&](std::int32_t max_kv, int q) {
    return static_cast<std::int32_t>(window > 0 ? std::min<std::int64_t>(max_kv, window + q - 1)
                                                : max_kv);
  };
  shape.splits_single = splits_for(n_single, visible(max_kv_single, 1));
  shape.splits_multi = splits_for(shape.n_multi, visible(max_kv_multi, tile_q_));
  if (!graph) {
    launch_step(shape);
    return R;
  }
  const std::uint64_t key = (std::uint64_t(Tp) << 33) | (std::uint64_t(decode_on_flash) << 32) |
                            (std::uint64_t(shape.splits_single) << 16) |
                            std::uint64_t(shape.splits_multi);
  auto it = graphs_.find(key);
  if (it == graphs_.end())
    it = graphs_.emplace(key, GraphExec::capture(s, [&] { launch_step(shape); })).first;
  it->second.launch(s);
  return R;
}

std::int32_t CudaModelRunner::graph_bucket(std::int32_t n) const {
  const std::int32_t cap = std::min({max_tokens_, max_seqs_, max_rows_});
  std::int32_t b = 1;
  while (b < n && b < 32) b *= 2;
  if (b < n) b = (n + 31) / 32 * 32;
  return std::max(n, std::min(b, cap));
}

void CudaModelRunner::launch_step(const StepShape &shape) {
  cudaStream_t s = ctx_.compute();
  const std::int32_t T = shape.T;
  const int R = shape.R;
  const std::int32_t *d = dev_in_.as<std::int32_t>();
  const std::int32_t *d_tokens = d, *d_positions = d + T, *d_slots = d + 2 * T, *d_rows = d + 3 * T;
  const auto *d_tiles = reinterpret_cast<const AttnTile *>(d + shape.tiles_at);
  const std::int32_t *d_table = d + shape.table_at;
  const int n_single = shape.n_single;

  const float eps = static_cast<float>(config_.rms_norm_eps);
  bf16 *normed = normed_.as<bf16>(), *qkv = qkv_.as<bf16>(), *proj = proj_.as<bf16>();
  float *residual = residual_.as<float>();
  launch_embedding(s, d_tokens, T, embed_.as<bf16>(), V_, static_cast<int>(H_), residual);
  AttnParams ap;
  ap.qkv = qkv;
  ap.row_stride = static_cast<int>(qkv_width_);
  ap.tiles = d_tiles;
  ap.num_tiles = n_single;
  ap.tile_q = tile_q_;
  ap.block_table = d_table;
  ap.cache = kv_->data();
  ap.layout = kv_->layout();
  ap.num_q_heads = static_cast<int>(nh_);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hd_));
  ap.num_splits = shape.splits_single;
  ap.partial_o = partial_o_.as<float>();
  ap.partial_ml = partial_ml_.as<float>();
  ap.split_counters = attn_merge_in_kernel_ ? split_counters_.as<unsigned>() : nullptr;
  ap.out = attn_.as<bf16>();
  ap.kv_heads_fast = attn_kv_heads_fast_;
  ap.decode_generic_group = attn_generic_group_;
  ap.window = static_cast<int>(
      std::min<std::int64_t>(config_.sliding_window.value_or(0), std::numeric_limits<int>::max()));
  AttnParams ap_multi = ap;
  ap_multi.tiles = d_tiles + n_single;
  ap_multi.num_tiles = shape.n_multi;
  ap_multi.num_splits = shape.splits_multi;
  AttnParams ap_flash = ap;
  ap_flash.tiles = d_tiles + n_single + shape.n_multi;
  ap_flash.num_tiles = shape.n_flash;
  ap_flash.tile_q = flash_tile_q_;
  ap_flash.num_splits = 1;
  ap_flash.flash_variant = flash_variant_;
  profile_begin(s);
  if (T <= fused_max_m_) {
    launch_fused_layers(shape, ap, ap_multi, ap_flash);
    return;
  }
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const Layer &L = layers_[li];
    const int layer = static_cast<int>(li);
    launch_add_rmsnorm(s, li == 0 ? nullptr : proj, residual, L.input_norm.as<bf16>(), normed, T,
                       static_cast<int>(H_), eps);
    profile_mark(s, kPhaseOther);
    run_linear(gemm_, s, L.qkv_fmt, L.qkv.data(), normed, qkv, false, T, dequant_scratch_.data());
    profile_mark(s, kPhaseGemm);
    launch_qkv_bias_norm(s, qkv, T, static_cast<int>(nh_), static_cast<int>(nkv_),
                         static_cast<int>(hd_), L.qkv_bias.as<bf16>(), L.q_norm.as<bf16>(),
                         L.k_norm.as<bf16>(), eps);
    launch_rope(s, qkv, T, static_cast<int>(qkv_width_), static_cast<int>(nh_),
                static_cast<int>(nkv_), static_cast<int>(hd_), d_positions, inv_freq_.as<float>(),
                rope_mscale_, config_.rope_style == RopeStyle::kInterleaved);
    launch_kv_write(s, qkv, T, static_cast<int>(qkv_width_), static_cast<int>(nh_ * hd_),
                    static_cast<int>((nh_ + nkv_) * hd_), d_slots, kv_->data(), kv_->layout(),
                    layer);
    profile_mark(s, kPhaseOther);
    ap.layer = ap_multi.layer = ap_flash.layer = layer;
    launch_decode_attention(s, ap);
    launch_paged_attention(s, ap_multi);
    if (shape.n_flash > 0) launch_flash_attention(s, ap_flash);
    profile_mark(s, kPhaseAttention);
    run_linear(gemm_, s, L.o_fmt, L.o.data(), attn_.as<bf16>(), proj, false, T,
               dequant_scratch_.data());
    profile_mark(s, kPhaseGemm);
    launch_add_rmsnorm(s, proj, residual, L.post_norm.as<bf16>(), normed, T, static_cast<int>(H_),
                       eps);
    profile_mark(s, kPhaseOther);
    run_linear(gemm_, s, L.gate_up_fmt, L.gate_up.data(), normed, gate_up_.data(), false, T,
               dequant_scratch_.data());
    profile_mark(s, kPhaseGemm);
    launch_swiglu(s, gate_up_.as<bf16>(), act_.as<bf16>(), T, static_cast<int>(I_));
    profile_mark(s, kPhaseOther);
    run_linear(gemm_, s, L.down_fmt, L.down.data(), act_.as<bf16>(), proj, false, T,
               dequant_scratch_.data());
    profile_mark(s, kPhaseGemm);
  }
  if (R > 0) {
    // The final norm is cheap next to the LM head: norm every row, then only the
    // requested rows go through the LM head.
    launch_add_rmsnorm(s, proj, residual, final_norm_.as<bf16>(), normed, T, static_cast<int>(H_),
                       eps);
    launch_gather_rows(s, normed, d_rows, R, static_cast<int>(H_), rows_in_.as<bf16>());
    const DeviceBuffer &head = config_.tie_word_embeddings ? embed_ : lm_head_;
    profile_mark(s, kPhaseOther);
    run_linear(gemm_, s, lm_head_fmt_, head.data(), rows_in_.as<bf16>(), logits_.data(), true, R,
               dequant_scratch_.data());
    profile_mark(s, kPhaseGemm);
  }
}

void CudaModelRunner::launch_fused_layers(const StepShape &shape, const AttnParams &ap_single,
                                          const AttnParams &ap_multi_in,
                                          const AttnParams &ap_flash_in) {
  cudaStream_t s = ctx_.compute();
  const int T = shape.T, R = shape.R, sms = ctx_.num_sms();
  const std::int32_t *d = dev_in_.as<std::int32_t>();
  const std::int32_t *d_positions = d + T, *d_slots = d + 2 * T, *d_rows = d + 3 * T;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  float *residual = residual_.as<float>();
  AttnParams ap = ap_single, ap_multi = ap_multi_in, ap_flash = ap_flash_in;
  ap.pdl = pdl_ && attn_pdl_;  // between qkv_rope_kv and o_proj, programmatic dependents too
  // One GEMV: y = W x(in), T rows.
  auto gemv = [&](const DeviceBuffer &w, std::int64_t N, std::int64_t K, GemvIn in, const void *x,
                  const bf16 *norm_weight, GemvOut out, void *y, int M,
                  const std::int32_t *rows = nullptr) {
    FusedGemvParams p;
    p.w = w.as<bf16>();
    p.N = N;
    p.K = K;
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
    p.l2_prefetch = l2_prefetch_;
    p.split_k = split_k_;
    launch_fused_gemv(s, p, sms);
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
    gemv(L.qkv, qkv_width_, H_, GemvIn::kRmsNorm, nullptr, L.input_norm.as<bf16>(), GemvOut::kBf16,
         qkv_.data(), T);
    profile_mark(s, kPhaseGemm);
    rk.bias = L.qkv_bias.as<bf16>();
    rk.q_norm = L.q_norm.as<bf16>();
    rk.k_norm = L.k_norm.as<bf16>();
    rk.layer = layer;
    launch_qkv_rope_kv(s, rk);
    profile_mark(s, kPhaseOther);
    ap.layer = ap_multi.layer = ap_flash.layer = layer;
    launch_decode_attention(s, ap);
    launch_paged_attention(s, ap_multi);
    if (shape.n_flash > 0) launch_flash_attention(s, ap_flash);
    profile_mark(s, kPhaseAttention);
    // o_proj adds into the residual; post norm in gate_up's prologue; SwiGLU in down's
    // prologue, whose epilogue adds into the residual again.
    gemv(L.o, H_, nh_ * hd_, GemvIn::kBf16, attn_.data(), nullptr, GemvOut::kAddResidual, residual,
         T);
    if (swiglu_epilogue_) {
      gemv(L.gate_up, 2 * I_, H_, GemvIn::kRmsNorm, nullptr, L.post_norm.as<bf16>(),
           GemvOut::kSwiglu, act_.data(), T);
      gemv(L.down, H_, I_, GemvIn::kBf16, act_.data(), nullptr, GemvOut::kAddResidual, residual, T);
    } else {
      gemv(L.gate_up, 2 * I_, H_, GemvIn::kRmsNorm, nullptr, L.post_norm.as<bf16>(), GemvOut::kBf16,
           gate_up_.data(), T);
      gemv(L.down, H_, I_, GemvIn::kSwiglu, gate_up_.data(), nullptr, GemvOut::kAddResidual,
           residual, T);
    }
    profile_mark(s, kPhaseGemm);
  }
  if (R > 0) {
    const DeviceBuffer &head = config_.tie_word_embeddings ? embed_ : lm_head_;
    gemv(head, V_, H_, GemvIn::kRmsNorm, nullptr, final_norm_.as<bf16>(), GemvOut::kF32,
         logits_.data(), R, d_rows);
    profile_mark(s, kPhaseGemm);
  }
}

void CudaModelRunner::forward(const ForwardBatch &batch, ForwardOutput &out) {
  const int R = enqueue(batch, out.row_seq, out.row_pos);
  out.vocab_size = static_cast<std::int32_t>(V_);
  out.logits.resize(static_cast<std::size_t>(R) * V_);
  const std::size_t bytes = static_cast<std::size_t>(R) * V_ * sizeof(float);
  compute_done_.record(ctx_.compute());
  if (R > 0) {
    compute_done_.make_wait(ctx_.copy_d2h());
    KEEL_CUDA_CHECK(cudaMemcpyAsync(host_logits_.data(), logits_.data(), bytes,
                                    cudaMemcpyDeviceToHost, ctx_.copy_d2h()));
    out_copied_.record(ctx_.copy_d2h());
    out_copied_.wait(ctx_.wait_timeout(), "cuda runner: logits copy");
    std::memcpy(out.logits.data(), host_logits_.data(), bytes);
  } else {
    compute_done_.wait(ctx_.wait_timeout(), "cuda runner: forward");
  }
  profile_collect();
}

void CudaModelRunner::forward_greedy(const ForwardBatch &batch, std::vector<TokenId> &next,
                                     std::vector<std::int32_t> *row_seq) {
  std::vector<std::int32_t> seqs, pos;
  const int R = enqueue(batch, seqs, pos);
  if (R > 0)
    launch_argmax(ctx_.compute(), logits_.as<float>(), R, static_cast<int>(V_),
                  argmax_.as<std::int32_t>(), argmax_scratch_.data(), ctx_.num_sms());
  compute_done_.record(ctx_.compute());
  next.resize(R);
  if (R > 0) {
    compute_done_.make_wait(ctx_.copy_d2h());
    KEEL_CUDA_CHECK(cudaMemcpyAsync(host_tokens_.data(), argmax_.data(), R * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, ctx_.copy_d2h()));
    out_copied_.record(ctx_.copy_d2h());
    out_copied_.wait(ctx_.wait_timeout(), "cuda runner: token copy");
    std::memcpy(next.data(), host_tokens_.data(), R * sizeof(std::int32_t));
  } else {
    compute_done_.wait(ctx_.wait_timeout(), "cuda runner: forward");
  }
  profile_collect();
  if (row_seq) *row_seq = std::move(seqs);
}

}  // namespace keel::cuda
