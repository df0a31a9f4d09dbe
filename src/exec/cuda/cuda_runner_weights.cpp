// CudaModelRunner's weights: device buffers of the model's shape, uploaded from the host
// as bf16 (f32, f16 and GGUF block formats converted at load; GGUF linear weights kept in
// their blocks where plan_weight_formats chose so, cuda_weight_formats.cpp) or filled with
// pseudo-random values on the device (benchmarks, tests).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/half.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/cuda_runner_detail.h"
#include "exec/cuda/k_fill.h"
#include "exec/cuda/rope_table.h"
#include "formats/mla_config.h"
#include "formats/quant.h"
#include "kv/kv_sizing.h"

namespace keel::cuda {

using runner_detail::bf16_bytes;
using runner_detail::device_memory;
using runner_detail::moe_has_router_bias;
using runner_detail::moe_router_bias_tensor;

namespace {
bool is_block_quantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K || t == DType::kMXFP4;
}

std::string layer_name(std::int64_t i, const char *rest) {
  return "model.layers." + std::to_string(i) + "." + rest;
}
}  // namespace

void CudaModelRunner::allocate_weights() {
  const auto &c = config_;
  mla_ = c.mla.has_value();
  for (std::int64_t l = 0; l < c.num_layers; ++l)
    plans_.push_back(mla_ ? mla_layer_plan(l) : arch::layer_plan(c, l));
  H_ = c.hidden_size;
  I_ = c.intermediate_size;
  nh_ = c.num_heads;
  nkv_ = c.num_kv_heads;
  hd_ = c.head_dim;
  V_ = c.vocab_size;
  // MLA: qkv_ holds q alone, [nh, nope + rope] a row (head_dim is nope + rope).
  qkv_width_ = mla_ ? nh_ * hd_ : (nh_ + 2 * nkv_) * hd_;
  // Two passes over the same shapes: the first only counts the bytes, so that weights the
  // device cannot hold are refused naming the bytes they need (a 507 from the registry)
  // rather than failing half-way through the upload.
  bool real = false;
  auto buffer = [&](std::size_t bytes) {
    weight_bytes_ += bytes;
    return real ? DeviceBuffer(bytes) : DeviceBuffer();
  };
  auto alloc = [&](std::int64_t elems) { return buffer(bf16_bytes(elems)); };
  // Linear weights: their planned device format (plan_weight_formats; bf16 if unplanned).
  auto alloc_linear = [&](LinearLayout &f, std::int64_t N, std::int64_t K) {
    if (!f.quantized()) {
      f.N = N;
      f.K = K;
      return alloc(N * K);
    }
    return buffer(f.bytes());
  };
  layers_.resize(c.num_layers);
  for (int pass = 0; pass < 2; ++pass) {
    real = pass == 1;
    weight_bytes_ = 0;
    if (!fed_.rows) embed_ = alloc(V_ * H_);  // a fed runner reads rows, not tokens
    if (!c.tie_word_embeddings && !fed_.head) lm_head_ = alloc_linear(lm_head_fmt_, V_, H_);
    if (c.tie_word_embeddings) lm_head_fmt_ = LinearLayout{V_, H_, {}, {}, {}};
    final_norm_ = alloc(H_);
    for (auto &l : layers_) {
      l.input_norm = alloc(H_);
      l.post_norm = alloc(H_);
      if (mla_) {
        const MlaConfig &m = *c.mla;
        const std::int64_t R = m.kv_lora_rank, rope = m.qk_rope_head_dim;
        if (m.q_lora_rank > 0) {
          l.mla_q_a = alloc_linear(l.mla_q_a_fmt, m.q_lora_rank, H_);
          l.mla_q_a_norm = alloc(m.q_lora_rank);
          l.mla_q = alloc_linear(l.mla_q_fmt, nh_ * m.qk_head_dim(), m.q_lora_rank);
        } else {
          l.mla_q = alloc_linear(l.mla_q_fmt, nh_ * m.qk_head_dim(), H_);
        }
        l.mla_kv_a = alloc_linear(l.mla_kv_a_fmt, R + rope, H_);
        l.mla_kv_a_norm = alloc(R);
        l.mla_kv_b = alloc(nh_ * (m.qk_nope_head_dim + m.v_head_dim) * R);
        l.o = alloc_linear(l.o_fmt, H_, nh_ * m.v_head_dim);
        if (m.dsa() && !m.shared_selection(&l - layers_.data())) {  // the indexer
          const std::int64_t Hi = m.index_n_heads, Di = m.index_head_dim;
          l.dsa_wq_b = alloc_linear(l.dsa_wq_b_fmt, Hi * Di, m.q_lora_rank);
          l.dsa_wk_proj = alloc_linear(l.dsa_wk_proj_fmt, Di + Hi, H_);
          l.dsa_k_norm = buffer(2 * Di * sizeof(float));
        }
      } else {
        l.qkv = alloc_linear(l.qkv_fmt, qkv_width_, H_);
        if (c.attention_bias) l.qkv_bias = alloc(qkv_width_);
        if (c.qk_norm) {
          l.q_norm = alloc(hd_);
          l.k_norm = alloc(hd_);
        }
        l.o = alloc_linear(l.o_fmt, H_, nh_ * hd_);
        if (c.attention_out_bias) l.o_bias = alloc(H_);
        if (c.attention_sinks) l.sinks = buffer(nh_ * sizeof(float));
      }
      const std::int64_t li = &l - layers_.data();
      if (c.moe && c.moe->sparse(li)) {  // every expert, stacked (cuda_runner_moe.cpp)
        const std::int64_t E = c.moe->num_experts, Ie = c.moe->expert_intermediate;
        l.router = alloc(E * H_);
        if (moe_has_router_bias(*c.moe)) l.router_bias = buffer(E * sizeof(float));
        if (const std::int64_t S = c.moe->shared_intermediate; S > 0) {
          l.shared_gate_up = alloc(2 * S * H_);
          l.shared_down = alloc(H_ * S);
        }
        // As expert_format_ stacks them (bf16, or the blocks / e4m3 bytes as stored).
        l.experts_gate_up = buffer(E * expert_format_.gate_up_stride());
        l.experts_down = buffer(E * expert_format_.down_stride());
        if (c.moe->expert_bias) {  // f32, so the biases add exactly as the CPU adds them
          l.experts_gate_up_bias = DeviceBuffer(E * 2 * Ie * sizeof(float));
          l.experts_down_bias = DeviceBuffer(E * H_ * sizeof(float));
          weight_bytes_ += l.experts_gate_up_bias.bytes() + l.experts_down_bias.bytes();
        }
        continue;
      }
      l.gate_up = alloc_linear(l.gate_up_fmt, 2 * I_, H_);
      l.down = alloc_linear(l.down_fmt, H_, I_);
    }
    if (!real) {
      const std::int64_t free_now = device_memory().free_now;
      if (static_cast<std::int64_t>(weight_bytes_) > free_now)
        throw Error(ErrorCode::kResourceExhausted,
                    std::string(kMemoryRefusalTag) + "its weights need " +
                        describe_bytes(static_cast<std::int64_t>(weight_bytes_)) +
                        " on the device (" + weight_format() + ") but only " +
                        describe_bytes(free_now) + " is free");
    }
  }
  // MLA rotates only the qk_rope_head_dim part of a head (and of the latent row), with
  // DeepSeek's yarn as the CPU's MlaModel does.
  ModelConfig rope_cfg = c;
  if (mla_) {
    rope_cfg.head_dim = c.mla->qk_rope_head_dim;
    rope_cfg.partial_rotary_factor = 1.0;
  }
  const RopeTable rope = make_rope_table(rope_cfg);
  inv_freq_ = DeviceBuffer(rope.inv_freq.size() * sizeof(float));
  rope_mscale_ = rope.mscale;
  rot_dim_ = static_cast<int>(2 * rope.inv_freq.size());
  KEEL_CUDA_CHECK(cudaMemcpyAsync(inv_freq_.data(), rope.inv_freq.data(), inv_freq_.bytes(),
                                  cudaMemcpyHostToDevice, ctx_.copy_h2d().get("cudaMemcpyAsync")));
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
                                      ctx_.copy_h2d().get("cudaMemcpyAsync")));
      std::vector<float> scales;
      if (t.dtype == DType::kF8_E4M3) {  // FP8: and its scales, as the device grid holds them
        scales = fp8_device_scales(t.scale, cols);
        KEEL_CUDA_CHECK(cudaMemcpyAsync(dst.as<std::byte>() + fmt->part_scale_offsets[part],
                                        scales.data(), scales.size() * sizeof(float),
                                        cudaMemcpyHostToDevice,
                                        ctx_.copy_h2d().get("cudaMemcpyAsync")));
      }
      done.record(ctx_.copy_h2d());
      done.wait(ctx_.wait_timeout(), "cuda runner: weight upload");
      return;
    }
    if (t.dtype == DType::kF8_E4M3) {
      // FP8 planned as bf16 (KEEL_QUANTIZED_WEIGHTS=off, or scales the device grid cannot
      // hold): scaled and rounded to bf16 here.
      converted.resize(n);
      std::vector<float> chunk;
      const std::int64_t rows_per_chunk = std::max<std::int64_t>(1, (1 << 20) / cols);
      for (std::int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
        const std::int64_t nr = std::min(rows_per_chunk, rows - r0);
        chunk.resize(nr * cols);
        dequantize_rows(t, r0, nr, chunk.data());
        for (std::int64_t i = 0; i < nr * cols; ++i)
          converted[r0 * cols + i] = f32_to_bf16(chunk[i]);
      }
      src = converted.data();
    } else if (is_block_quantized(t.dtype)) {
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
                                    cudaMemcpyHostToDevice,
                                    ctx_.copy_h2d().get("cudaMemcpyAsync")));
    // `converted` is reused by the next tensor: wait for this copy to have read it.
    done.record(ctx_.copy_h2d());
    done.wait(ctx_.wait_timeout(), "cuda runner: weight upload");
  };
  // Copies the expert tensor `name` of blocks (MXFP4 or GGUF, as `w` says) to dst + byte
  // offset as stored (GGML blocks; gpt-oss's _blocks / _scales already repacked by
  // ModelWeights).
  auto put_blocks = [&](const std::string &name, const DeviceWeight &w, const DeviceBuffer &dst,
                        std::size_t offset) {
    const TensorView t = weights(name);
    if (t.shape.size() != 2 || t.shape[0] != w.rows || t.shape[1] != w.cols)
      throw Error(ErrorCode::kFormat, "weights: " + name + ": unexpected shape for this config");
    const QuantFormat blocks = w.format == WeightFormat::kMxfp4 ? QuantFormat::kMXFP4 : w.blocks;
    if (device_quant_format(t.dtype) != blocks)
      throw Error(ErrorCode::kFormat, "weights: " + name + ": expected " + w.name() +
                                          " like the other experts, found " +
                                          std::string(dtype_name(t.dtype)));
    const std::size_t bytes = w.bytes();
    if (t.data == nullptr || t.nbytes < bytes)
      throw Error(ErrorCode::kFormat, "weights: " + name + ": data shorter than its shape");
    KEEL_CUDA_CHECK(cudaMemcpyAsync(dst.as<std::byte>() + offset, t.data, bytes,
                                    cudaMemcpyHostToDevice,
                                    ctx_.copy_h2d().get("cudaMemcpyAsync")));
    done.record(ctx_.copy_h2d());  // the host mapping may be released after the upload
    done.wait(ctx_.wait_timeout(), "cuda runner: weight upload");
  };
  // Copies the FP8 tensor `name` ([rows, cols], FP8 experts) to dst + w_offset bytes as
  // stored, and its scales as the device grid holds them to dst + s_offset bytes.
  std::vector<float> grid;
  auto put_fp8 = [&](const std::string &name, std::int64_t rows, std::int64_t cols,
                     const DeviceBuffer &dst, std::size_t w_offset, std::size_t s_offset) {
    const TensorView t = weights(name);
    if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] != cols)
      throw Error(ErrorCode::kFormat, "weights: " + name + ": unexpected shape for this config");
    if (t.dtype != DType::kF8_E4M3 || !t.scale.present())
      throw Error(ErrorCode::kFormat, "weights: " + name +
                                          ": expected f8_e4m3 with scales like "
                                          "the other experts");
    if (t.data == nullptr || t.nbytes < static_cast<std::size_t>(rows * cols))
      throw Error(ErrorCode::kFormat, "weights: " + name + ": data shorter than its shape");
    grid = fp8_device_scales(t.scale, cols);
    KEEL_CUDA_CHECK(cudaMemcpyAsync(dst.as<std::byte>() + w_offset, t.data, rows * cols,
                                    cudaMemcpyHostToDevice,
                                    ctx_.copy_h2d().get("cudaMemcpyAsync")));
    KEEL_CUDA_CHECK(cudaMemcpyAsync(dst.as<std::byte>() + s_offset, grid.data(),
                                    grid.size() * sizeof(float), cudaMemcpyHostToDevice,
                                    ctx_.copy_h2d().get("cudaMemcpyAsync")));
    done.record(ctx_.copy_h2d());  // `grid` is reused by the next tensor
    done.wait(ctx_.wait_timeout(), "cuda runner: weight upload");
  };
  // Copies the 1-D tensor `name` ([n]: bf16, f16 or f32) to dst + `at` floats, as f32.
  std::vector<float> floats;
  auto put_f32 = [&](const std::string &name, std::int64_t n, const DeviceBuffer &dst,
                     std::int64_t at) {
    const TensorView t = weights(name);
    if (t.shape.size() != 1 || t.shape[0] != n)
      throw Error(ErrorCode::kFormat, "weights: " + name + ": unexpected shape for this config");
    if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16)
      throw Error(ErrorCode::kUnsupported, "weights: " + name + ": dtype " +
                                               std::string(dtype_name(t.dtype)) +
                                               " is not supported for a bias");
    if (t.data == nullptr || t.nbytes < static_cast<std::size_t>(dtype_bytes(t.dtype, n)))
      throw Error(ErrorCode::kFormat, "weights: " + name + ": data shorter than its shape");
    floats.resize(n);
    for (std::int64_t i = 0; i < n; ++i) {
      if (t.dtype == DType::kF32) {
        std::memcpy(&floats[i], t.data + i * 4, 4);
      } else {
        std::uint16_t h;
        std::memcpy(&h, t.data + i * 2, 2);
        floats[i] = t.dtype == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
    }
    KEEL_CUDA_CHECK(cudaMemcpyAsync(dst.as<float>() + at, floats.data(), n * sizeof(float),
                                    cudaMemcpyHostToDevice,
                                    ctx_.copy_h2d().get("cudaMemcpyAsync")));
    done.record(ctx_.copy_h2d());  // `floats` is reused by the next bias
    done.wait(ctx_.wait_timeout(), "cuda runner: weight upload");
  };
  if (!fed_.rows) put("model.embed_tokens.weight", V_, H_, embed_, 0);
  if (!config_.tie_word_embeddings && !fed_.head)
    put("lm_head.weight", V_, H_, lm_head_, 0, &lm_head_fmt_);
  put("model.norm.weight", H_, 0, final_norm_, 0);
  for (std::int64_t i = 0; i < config_.num_layers; ++i) {
    Layer &l = layers_[i];
    put(layer_name(i, "input_layernorm.weight"), H_, 0, l.input_norm, 0);
    put(layer_name(i, "post_attention_layernorm.weight"), H_, 0, l.post_norm, 0);
    if (mla_) {  // formats/mla_config.h names them
      const MlaConfig &m = *config_.mla;
      const std::int64_t R = m.kv_lora_rank, qk = m.qk_head_dim();
      if (m.q_lora_rank > 0) {
        put(mla_name(i, "q_a_proj.weight"), m.q_lora_rank, H_, l.mla_q_a, 0);
        put(mla_name(i, "q_a_layernorm.weight"), m.q_lora_rank, 0, l.mla_q_a_norm, 0);
        put(mla_name(i, "q_b_proj.weight"), nh_ * qk, m.q_lora_rank, l.mla_q, 0);
      } else {
        put(mla_name(i, "q_proj.weight"), nh_ * qk, H_, l.mla_q, 0);
      }
      put(mla_name(i, "kv_a_proj_with_mqa.weight"), R + m.qk_rope_head_dim, H_, l.mla_kv_a, 0);
      put(mla_name(i, "kv_a_layernorm.weight"), R, 0, l.mla_kv_a_norm, 0);
      put(mla_name(i, "kv_b_proj.weight"), nh_ * (m.qk_nope_head_dim + m.v_head_dim), R, l.mla_kv_b,
          0);
      put(mla_name(i, "o_proj.weight"), H_, nh_ * m.v_head_dim, l.o, 0);
      if (l.dsa_wq_b.bytes()) {  // a layer that runs DSA's indexer (dsa_indexer.h's tensors)
        const std::int64_t Hi = m.index_n_heads, Di = m.index_head_dim;
        put(mla_name(i, "indexer.wq_b.weight"), Hi * Di, m.q_lora_rank, l.dsa_wq_b, 0);
        put(mla_name(i, "indexer.wk.weight"), Di, H_, l.dsa_wk_proj, 0);
        put(mla_name(i, "indexer.weights_proj.weight"), Hi, H_, l.dsa_wk_proj, bf16_bytes(Di * H_));
        put_f32(mla_name(i, "indexer.k_norm.weight"), Di, l.dsa_k_norm, 0);
        put_f32(mla_name(i, "indexer.k_norm.bias"), Di, l.dsa_k_norm, Di);
      }
    } else {
      put(layer_name(i, "self_attn.q_proj.weight"), nh_ * hd_, H_, l.qkv, 0, &l.qkv_fmt, 0);
      put(layer_name(i, "self_attn.k_proj.weight"), nkv_ * hd_, H_, l.qkv,
          bf16_bytes(nh_ * hd_ * H_), &l.qkv_fmt, 1);
      put(layer_name(i, "self_attn.v_proj.weight"), nkv_ * hd_, H_, l.qkv,
          bf16_bytes((nh_ + nkv_) * hd_ * H_), &l.qkv_fmt, 2);
      if (config_.attention_bias) {
        put(layer_name(i, "self_attn.q_proj.bias"), nh_ * hd_, 0, l.qkv_bias, 0);
        put(layer_name(i, "self_attn.k_proj.bias"), nkv_ * hd_, 0, l.qkv_bias,
            bf16_bytes(nh_ * hd_));
        put(layer_name(i, "self_attn.v_proj.bias"), nkv_ * hd_, 0, l.qkv_bias,
            bf16_bytes((nh_ + nkv_) * hd_));
      }
      if (config_.qk_norm) {
        put(layer_name(i, "self_attn.q_norm.weight"), hd_, 0, l.q_norm, 0);
        put(layer_name(i, "self_attn.k_norm.weight"), hd_, 0, l.k_norm, 0);
      }
      put(layer_name(i, "self_attn.o_proj.weight"), H_, nh_ * hd_, l.o, 0, &l.o_fmt);
      if (config_.attention_out_bias)
        put(layer_name(i, "self_attn.o_proj.bias"), H_, 0, l.o_bias, 0);
      if (config_.attention_sinks) put_f32(attention_sinks_name(i), nh_, l.sinks, 0);
    }
    if (config_.moe && config_.moe->sparse(i)) {
      const MoeConfig &m = *config_.moe;
      const std::int64_t E = m.num_experts, Ie = m.expert_intermediate;
      put(moe_router_name(m, i), E, H_, l.router, 0);
      if (l.router_bias.bytes()) put_f32(moe_router_bias_tensor(m, i), E, l.router_bias, 0);
      if (const std::int64_t S = m.shared_intermediate; S > 0) {
        put(moe_shared_name(m, i, ExpertMatrix::kGate), S, H_, l.shared_gate_up, 0);
        put(moe_shared_name(m, i, ExpertMatrix::kUp), S, H_, l.shared_gate_up, bf16_bytes(S * H_));
        put(moe_shared_name(m, i, ExpertMatrix::kDown), H_, S, l.shared_down, 0);
      }
      for (std::int64_t e = 0; e < E; ++e) {
        for (const ExpertMatrix x : {ExpertMatrix::kGate, ExpertMatrix::kUp, ExpertMatrix::kDown}) {
          // Expert e's matrix x where expert_format_ puts it, in that format.
          const DeviceBuffer &dst = x == ExpertMatrix::kDown ? l.experts_down : l.experts_gate_up;
          const DeviceWeight w = expert_format_.matrix(x, dst.data());
          const auto offset = [&](const void *p) {
            return static_cast<std::size_t>(static_cast<const std::byte *>(p) -
                                            dst.as<std::byte>()) +
                   e * w.expert_stride;
          };
          const std::string name = moe_expert_name(m, i, e, x);
          switch (w.format) {
            case WeightFormat::kBf16:
              put(name, w.rows, w.cols, dst, offset(w.data));
              break;
            case WeightFormat::kGguf:
            case WeightFormat::kMxfp4:
              put_blocks(name, w, dst, offset(w.data));
              break;
            case WeightFormat::kFp8:
              put_fp8(name, w.rows, w.cols, dst, offset(w.data), offset(w.scales));
              break;
          }
        }
        if (m.expert_bias) {
          put_f32(moe_expert_bias_name(m, i, e, ExpertMatrix::kGate), Ie, l.experts_gate_up_bias,
                  e * 2 * Ie);
          put_f32(moe_expert_bias_name(m, i, e, ExpertMatrix::kUp), Ie, l.experts_gate_up_bias,
                  e * 2 * Ie + Ie);
          put_f32(moe_expert_bias_name(m, i, e, ExpertMatrix::kDown), H_, l.experts_down_bias,
                  e * H_);
        }
      }
      continue;
    }
    put(layer_name(i, "mlp.gate_proj.weight"), I_, H_, l.gate_up, 0, &l.gate_up_fmt, 0);
    put(layer_name(i, "mlp.up_proj.weight"), I_, H_, l.gate_up, bf16_bytes(I_ * H_), &l.gate_up_fmt,
        1);
    put(layer_name(i, "mlp.down_proj.weight"), H_, I_, l.down, 0, &l.down_fmt);
  }
}

void CudaModelRunner::randomize_weights(std::uint64_t seed) {
  const StreamRef s = ctx_.compute();
  std::uint64_t n = 0;
  // Uniform with variance 1/fan_in keeps activations O(1) through the layers.
  auto fill = [&](const DeviceBuffer &b, std::int64_t fan_in) {
    const float a = fan_in > 0 ? std::sqrt(3.0f / static_cast<float>(fan_in)) : 1.0f;
    const float lo = fan_in > 0 ? -a : 1.0f, hi = fan_in > 0 ? a : 1.0f;  // norms: all ones
    launch_fill_uniform(s, b.as<bf16>(), static_cast<std::int64_t>(b.bytes() / sizeof(bf16)),
                        seed + (n++), lo, hi);
  };
  std::vector<float> ln;  // DSA's LayerNorm parameters, the same for every layer
  fill(embed_, 1);
  if (lm_head_.bytes()) fill(lm_head_, H_);
  fill(final_norm_, 0);
  for (auto &l : layers_) {
    fill(l.input_norm, 0);
    if (mla_) {  // unit-variance rows for every projection; norms all ones
      const MlaConfig &m = *config_.mla;
      if (l.mla_q_a.bytes()) {
        fill(l.mla_q_a, H_);
        fill(l.mla_q_a_norm, 0);
        fill(l.mla_q, m.q_lora_rank);
      } else {
        fill(l.mla_q, H_);
      }
      fill(l.mla_kv_a, H_);
      fill(l.mla_kv_a_norm, 0);
      fill(l.mla_kv_b, m.kv_lora_rank);
      fill(l.o, nh_ * m.v_head_dim);
      if (l.dsa_wq_b.bytes()) {
        fill(l.dsa_wq_b, m.q_lora_rank);
        fill(l.dsa_wk_proj, H_);
        // f32 LayerNorm weight 1, bias 0 (random bf16 bits would not be floats); `ln` lives
        // until the wait below.
        ln.assign(2 * m.index_head_dim, 0.0f);
        std::fill(ln.begin(), ln.begin() + m.index_head_dim, 1.0f);
        KEEL_CUDA_CHECK(cudaMemcpyAsync(l.dsa_k_norm.data(), ln.data(), ln.size() * sizeof(float),
                                        cudaMemcpyHostToDevice, s.get("cudaMemcpyAsync")));
      }
    } else {
      fill(l.qkv, H_);
      if (l.qkv_bias.bytes()) fill(l.qkv_bias, H_);
      if (l.q_norm.bytes()) fill(l.q_norm, 0);
      if (l.k_norm.bytes()) fill(l.k_norm, 0);
      fill(l.o, nh_ * hd_);
    }
    if (l.o_bias.bytes()) fill(l.o_bias, H_);
    if (l.sinks.bytes())  // f32: zeros, a sink at logit 0
      KEEL_CUDA_CHECK(
          cudaMemsetAsync(l.sinks.data(), 0, l.sinks.bytes(), s.get("cudaMemsetAsync")));
    fill(l.post_norm, 0);
    if (l.router.bytes()) {  // a mixture-of-experts layer
      const std::int64_t Ie = config_.moe->expert_intermediate;
      fill(l.router, H_);
      if (l.router_bias.bytes())  // f32: zeros (random bf16 bits would not be floats)
        KEEL_CUDA_CHECK(cudaMemsetAsync(l.router_bias.data(), 0, l.router_bias.bytes(),
                                        s.get("cudaMemsetAsync")));
      if (l.shared_gate_up.bytes()) {
        fill(l.shared_gate_up, H_);
        fill(l.shared_down, config_.moe->shared_intermediate);
      }
      if (expert_format_.format == WeightFormat::kMxfp4) {
        launch_fill_mxfp4(s, l.experts_gate_up.data(),
                          static_cast<std::int64_t>(l.experts_gate_up.bytes() / 17), seed + (n++),
                          H_);
        launch_fill_mxfp4(s, l.experts_down.data(),
                          static_cast<std::int64_t>(l.experts_down.bytes() / 17), seed + (n++), Ie);
      } else {
        fill(l.experts_gate_up, H_);
        fill(l.experts_down, Ie);
      }
      continue;
    }
    fill(l.gate_up, H_);
    fill(l.down, I_);
  }
  Event done;
  done.record(s);
  done.wait(ctx_.wait_timeout(), "cuda runner: random weights");
}

}  // namespace keel::cuda
