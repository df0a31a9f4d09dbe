#include "exec/arch/llama.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/error.h"
#include "exec/arch/weight_binding.h"
#include "exec/cpu/activation.h"
#include "exec/cpu/norm.h"
#include "exec/cpu/quant_blocks.h"

namespace keel::arch {

namespace {

std::vector<float> slice(const std::vector<float> &v, std::int64_t begin, std::int64_t count) {
  return std::vector<float>(v.begin() + begin, v.begin() + begin + count);
}

}  // namespace

LlamaLayer bind_llama_layer(const ModelConfig &cfg, const WeightLookup &lookup, std::int64_t l,
                            bool sparse) {
  const std::int64_t hidden = cfg.hidden_size, H = cfg.num_heads, G = cfg.num_kv_heads,
                     D = cfg.head_dim, I = cfg.intermediate_size;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  LlamaLayer L;
  L.wq = need_tensor(lookup, p + "self_attn.q_proj.weight", {H * D, hidden});
  L.wk = need_tensor(lookup, p + "self_attn.k_proj.weight", {G * D, hidden});
  L.wv = need_tensor(lookup, p + "self_attn.v_proj.weight", {G * D, hidden});
  L.wo = need_tensor(lookup, p + "self_attn.o_proj.weight", {hidden, H * D});
  if (sparse) {
    L.moe = std::make_unique<MoeFfn>(cfg, l, lookup);
  } else {
    L.w_gate = need_tensor(lookup, p + "mlp.gate_proj.weight", {I, hidden});
    L.w_up = need_tensor(lookup, p + "mlp.up_proj.weight", {I, hidden});
    L.w_down = need_tensor(lookup, p + "mlp.down_proj.weight", {hidden, I});
  }
  L.attn_norm = need_vector(lookup, p + "input_layernorm.weight", hidden);
  L.ffn_norm = need_vector(lookup, p + "post_attention_layernorm.weight", hidden);
  if (cfg.attention_bias || lookup(p + "self_attn.q_proj.bias")) {
    L.bq = need_vector(lookup, p + "self_attn.q_proj.bias", H * D);
    L.bk = need_vector(lookup, p + "self_attn.k_proj.bias", G * D);
    L.bv = need_vector(lookup, p + "self_attn.v_proj.bias", G * D);
  }
  if (cfg.attention_out_bias || lookup(p + "self_attn.o_proj.bias"))
    L.bo = need_vector(lookup, p + "self_attn.o_proj.bias", hidden);
  if (cfg.attention_sinks || lookup(attention_sinks_name(l)))
    L.sinks = need_vector(lookup, attention_sinks_name(l), H);
  if (cfg.qk_norm || lookup(p + "self_attn.q_norm.weight")) {
    L.q_norm = need_vector(lookup, p + "self_attn.q_norm.weight", D);
    L.k_norm = need_vector(lookup, p + "self_attn.k_norm.weight", D);
  }
  return L;
}

LlamaModel::LlamaModel(const ModelConfig &cfg, const WeightLookup &lookup,
                       const parallel::ShardPlan *shard)
    : cfg_(cfg) {
  const std::int64_t hidden = cfg.hidden_size, H = cfg.num_heads, G = cfg.num_kv_heads,
                     D = cfg.head_dim, I = cfg.intermediate_size, V = cfg.vocab_size;
  if (hidden <= 0 || H <= 0 || G <= 0 || D <= 0 || I <= 0 || V <= 0 || cfg.num_layers <= 0 ||
      H % G != 0)
    throw Error(ErrorCode::kFormat, "config: inconsistent model dimensions");
  if (cfg.num_layers > 4096 || hidden > (1 << 20) || V > (1 << 24))
    throw Error(ErrorCode::kFormat, "config: model dimensions out of range");
  embed_ = need_tensor(lookup, "model.embed_tokens.weight", {V, hidden});
  if (embed_.dtype == DType::kF8_E4M3)
    throw Error(ErrorCode::kUnsupported,
                "model.embed_tokens.weight: fp8 embeddings are not "
                "supported (the FP8 releases keep them bf16)");
  if (auto head = lookup("lm_head.weight"); head && !cfg.tie_word_embeddings) {
    lm_head_ = need_tensor(lookup, "lm_head.weight", {V, hidden});
  } else if (head) {
    lm_head_ = need_tensor(lookup, "lm_head.weight", {V, hidden});  // tied, but stored anyway
  } else {
    if (!cfg.tie_word_embeddings) throw Error(ErrorCode::kFormat, "lm_head.weight: tensor missing");
    lm_head_ = embed_;
  }
  final_norm_ = need_vector(lookup, "model.norm.weight", hidden);
  layers_.resize(cfg.num_layers);
  for (std::int64_t l = 0; l < cfg.num_layers; ++l) {
    layers_[l] = bind_llama_layer(cfg, lookup, l, cfg.moe && cfg.moe->sparse(l));
  }
  // The weights decide the optional steps: biases or q/k norms present in the files
  // are applied even when the config does not name them.
  for (std::int64_t l = 0; l < cfg.num_layers; ++l) {
    ModelConfig plan_cfg = cfg;
    plan_cfg.attention_bias = !layers_[l].bq.empty();
    plan_cfg.qk_norm = !layers_[l].q_norm.empty();
    plan_cfg.attention_out_bias = !layers_[l].bo.empty();
    plans_.push_back(layer_plan(plan_cfg, l));
  }
  rope_ = cpu::make_rope_table(cfg);
  shard_ = shard ? *shard : parallel::make_shard_plan(cfg, 0, 1);
  if (shard_.size > 1 && cfg.moe)
    throw Error(ErrorCode::kUnsupported,
                "tensor parallelism is not supported for mixture-of-experts models yet");
  if (shard_.size > 1) {
    const parallel::ShardPlan &p = shard_;
    lm_head_ = parallel::slice_rows(lm_head_, p.vocab_begin, p.vocab_count);
    for (LlamaLayer &L : layers_) {
      L.wq = parallel::slice_rows(L.wq, p.q_begin(), p.heads * D);
      L.wk = parallel::slice_rows(L.wk, p.kv_begin(), p.kv_heads * D);
      L.wv = parallel::slice_rows(L.wv, p.kv_begin(), p.kv_heads * D);
      L.wo = parallel::slice_cols(L.wo, p.q_begin(), p.heads * D, owned_.emplace_back());
      L.w_gate = parallel::slice_rows(L.w_gate, p.ffn_begin(), p.intermediate);
      L.w_up = parallel::slice_rows(L.w_up, p.ffn_begin(), p.intermediate);
      L.w_down =
          parallel::slice_cols(L.w_down, p.ffn_begin(), p.intermediate, owned_.emplace_back());
      if (!L.bq.empty()) {
        L.bq = slice(L.bq, p.q_begin(), p.heads * D);
        L.bk = slice(L.bk, p.kv_begin(), p.kv_heads * D);
        L.bv = slice(L.bv, p.kv_begin(), p.kv_heads * D);
      }
      if (!L.sinks.empty()) L.sinks = slice(L.sinks, p.q_begin() / D, p.heads);
    }
  }
}

std::int64_t LlamaModel::weight_bytes() const {
  std::int64_t b = static_cast<std::int64_t>(lm_head_.nbytes);
  for (const auto &L : layers_)
    b += static_cast<std::int64_t>(L.wq.nbytes + L.wk.nbytes + L.wv.nbytes + L.wo.nbytes +
                                   L.w_gate.nbytes + L.w_up.nbytes + L.w_down.nbytes) +
         (L.moe ? L.moe->active_bytes() : 0);
  return b;
}

void LlamaModel::validate(const ForwardBatch &batch, const cpu::CpuKvStore &kv) const {
  if (kv.row_floats() != shard_.kv_heads * cfg_.head_dim)
    throw Error(ErrorCode::kInternal, "llama: the KV cache is not sized for this model's KV heads");
  check_forward_batch(batch, kv.num_blocks(), kv.block_size(), cfg_.vocab_size);
  for (const std::int32_t l : batch.hidden_layers)
    if (l < 0 || l >= cfg_.num_layers)
      throw Error(ErrorCode::kInvalidArgument, "forward batch: hidden_layers names layer " +
                                                   std::to_string(l) + " of " +
                                                   std::to_string(cfg_.num_layers));
}

void LlamaModel::forward(const ForwardBatch &batch, ForwardOutput &out, cpu::CpuKvStore &kv,
                         ExecContext &ctx, parallel::Communicator *comm, Head head) {
  validate(batch, kv);
  if (shard_.size > 1 && (!comm || comm->size() != shard_.size || comm->rank() != shard_.rank))
    throw Error(ErrorCode::kInternal, "llama: a sharded model needs its group's communicator");
  ThreadPool &pool = ctx.pool();
  Workspace &ws = ctx.workspace();
  ws.reset();
  const std::int64_t T = batch.total_tokens();
  // This rank's heads, KV heads and MLP slice (all of them without sharding).
  const std::int64_t hidden = cfg_.hidden_size, H = shard_.heads, G = shard_.kv_heads,
                     D = cfg_.head_dim, I = shard_.intermediate, V = cfg_.vocab_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const std::int32_t bs = kv.block_size();
  // Row-parallel outputs are partial sums over this rank's columns.
  auto sum_over_ranks = [&](float *y) {
    if (shard_.size > 1) comm->all_reduce_sum(y, static_cast<std::size_t>(T * hidden), DType::kF32);
  };

  std::vector<std::int32_t> token_seq(T), token_pos(T);
  for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
    const auto &s = batch.seqs[i];
    for (std::int32_t j = 0; j < s.num_tokens; ++j) {
      token_seq[s.token_offset + j] = static_cast<std::int32_t>(i);
      token_pos[s.token_offset + j] = s.start_pos + j;
    }
  }

  float *x = ws.floats(T * hidden);   // [T, hidden] residual stream
  float *h = ws.floats(T * hidden);   // [T, hidden] normed
  float *q = ws.floats(T * H * D);    // [T, H, D]
  float *k = ws.floats(T * G * D);    // [T, G, D]
  float *v = ws.floats(T * G * D);    // [T, G, D]
  float *att = ws.floats(T * H * D);  // [T, H, D]
  float *gate = ws.floats(T * I);     // [T, I]
  float *up = ws.floats(T * I);       // [T, I]

  // [T, hidden]: a MoE block's output (exec/arch/moe_ffn.h)
  float *moe_out = cfg_.moe ? ws.floats(T * hidden) : nullptr;

  const std::int64_t row_bytes = dtype_bytes(embed_.dtype, hidden);
  for (std::int64_t t = 0; t < T; ++t)
    cpu::dequantize_row(embed_.dtype, embed_.data + batch.tokens[t] * row_bytes, x + t * hidden,
                        hidden);

  cpu::AttentionShape ashape{H, G, D, 1.0f / std::sqrt(static_cast<float>(D))};
  // KEEL_CPU_ATTENTION=reference keeps prefill on the per-token path (for A/B benchmarks).
  if (const char *mode = std::getenv("KEEL_CPU_ATTENTION"))
    ashape.blocked = std::string_view(mode) != "reference";
  auto add_bias = [](float *y, const std::vector<float> &b, std::int64_t rows) {
    if (b.empty()) return;
    const std::int64_t n = static_cast<std::int64_t>(b.size());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < n; ++i) y[r * n + i] += b[i];
  };

  // The outputs of the decoder layers batch.hidden_layers names (an EAGLE-3 head's aux
  // rows), copied as each of them ends; nothing is kept otherwise.
  const auto aux_n = static_cast<std::int64_t>(batch.want_hidden ? batch.hidden_layers.size() : 0);
  if (aux_n > 0) {
    if (shard_.size != 1) throw Error(ErrorCode::kInternal, "llama: hidden rows from a shard");
    out.hidden.assign(static_cast<std::size_t>(T * hidden * aux_n), 0.0f);
  }
  auto keep_layer_output = [&](std::int64_t l) {
    for (std::int64_t j = 0; j < aux_n; ++j) {
      if (batch.hidden_layers[j] != l) continue;
      for (std::int64_t t = 0; t < T; ++t)
        std::copy(x + t * hidden, x + (t + 1) * hidden,
                  out.hidden.data() + (t * aux_n + j) * hidden);
    }
  };

  using S = LayerStep;
  for (std::int64_t l = 0; l < cfg_.num_layers; ++l) {
    const LlamaLayer &L = layers_[l];
    for (const LayerStep step : plans_[l].steps) {
      switch (step) {
        case S::kInputNorm:
          cpu::rmsnorm(x, L.attn_norm.data(), h, T, hidden, eps);
          break;
        case S::kQkvProj: {
          const cpu::LinearJob qkv[] = {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}};
          cpu::linear_multi(qkv, h, T, pool, lin_scratch_);
          break;
        }
        case S::kQkvBias:
          add_bias(q, L.bq, T);
          add_bias(k, L.bk, T);
          add_bias(v, L.bv, T);
          break;
        case S::kQkNorm:
          cpu::rmsnorm(q, L.q_norm.data(), q, T * H, D, eps);
          cpu::rmsnorm(k, L.k_norm.data(), k, T * G, D, eps);
          break;
        case S::kRope:
          cpu::apply_rope(rope_, q, T, H, D, token_pos.data());
          cpu::apply_rope(rope_, k, T, G, D, token_pos.data());
          break;
        case S::kKvWrite:
          for (std::int64_t t = 0; t < T; ++t) {
            const SequenceSlice &s = batch.seqs[token_seq[t]];
            const std::int32_t p = token_pos[t];
            const std::int32_t block = batch.block_table[s.block_offset + p / bs];
            std::copy(k + t * G * D, k + (t + 1) * G * D, kv.row(block, l, 0, p % bs));
            std::copy(v + t * G * D, v + (t + 1) * G * D, kv.row(block, l, 1, p % bs));
          }
          break;
        case S::kAttention:
          ashape.window = cfg_.window_of(l).value_or(0);
          ashape.sinks = L.sinks.empty() ? nullptr : L.sinks.data();
          cpu::paged_attention(q, att, batch, token_seq.data(), token_pos.data(), kv, l, ashape,
                               pool, attn_scores_);
          break;
        case S::kOProj:
          cpu::linear(L.wo, att, T, h, pool, lin_scratch_);
          sum_over_ranks(h);
          break;
        case S::kOBias:  // after the rank sum: every rank holds the whole h, add it once
          add_bias(h, L.bo, T);
          break;
        case S::kResidualAdd:
          for (std::int64_t i = 0; i < T * hidden; ++i) x[i] += h[i];
          break;
        case S::kPostNorm:
          cpu::rmsnorm(x, L.ffn_norm.data(), h, T, hidden, eps);
          break;
        case S::kGateUpProj: {
          const cpu::LinearJob gate_up[] = {{&L.w_gate, gate}, {&L.w_up, up}};
          cpu::linear_multi(gate_up, h, T, pool, lin_scratch_);
          break;
        }
        case S::kSwiglu:
          cpu::swiglu(gate, up, gate, T * I);
          break;
        case S::kDownProj:
          cpu::linear(L.w_down, gate, T, h, pool, lin_scratch_);
          sum_over_ranks(h);
          break;
        case S::kMoeFfn:
          L.moe->forward(h, T, moe_out, pool, lin_scratch_, ws);
          std::copy(moe_out, moe_out + T * hidden, h);
          break;
      }
    }
    if (aux_n > 0) keep_layer_output(l);
  }

  if (aux_n == 0 && batch.want_hidden) {
    if (shard_.size != 1) throw Error(ErrorCode::kInternal, "llama: hidden rows from a shard");
    out.hidden.assign(x, x + T * hidden);
  } else if (aux_n == 0) {
    out.hidden.clear();
  }
  // Logits for the rows the batch asks for.
  out.vocab_size = static_cast<std::int32_t>(V);
  const std::vector<std::int64_t> rows = logit_rows(batch, out);
  const std::int64_t R = static_cast<std::int64_t>(rows.size());
  const bool greedy_ids = head == Head::kGreedyIds;
  if (greedy_ids && shard_.size != 1)
    throw Error(ErrorCode::kInternal, "llama: greedy ids from a sharded lm_head");
  out.logits.resize(static_cast<std::size_t>(greedy_ids ? 0 : R * V));
  out.sampled.assign(greedy_ids ? static_cast<std::size_t>(R) : 0, 0);
  out.sampled_logprobs.assign(greedy_ids ? static_cast<std::size_t>(R) : 0, 0.0f);
  if (R == 0) return;
  float *sel = ws.floats(R * hidden);  // [R, hidden]
  for (std::int64_t r = 0; r < R; ++r)
    std::copy(x + rows[r] * hidden, x + (rows[r] + 1) * hidden, sel + r * hidden);
  cpu::rmsnorm(sel, final_norm_.data(), sel, R, hidden, eps);
  if (greedy_ids) {
    cpu::linear_argmax(lm_head_, sel, R, out.sampled.data(), pool, lin_scratch_);
    return;
  }
  if (shard_.size == 1) {
    cpu::linear(lm_head_, sel, R, out.logits.data(), pool, lin_scratch_);
    return;
  }
  // Vocab-parallel: this rank's columns of every row, the rest zero; the sum over ranks
  // is then exact (x + 0 == x) and leaves the whole rows on every rank.
  const std::int64_t vb = shard_.vocab_begin, vn = shard_.vocab_count;
  std::fill(out.logits.begin(), out.logits.end(), 0.0f);
  if (vn > 0) {
    float *part = ws.floats(R * vn);  // [R, vn]
    cpu::linear(lm_head_, sel, R, part, pool, lin_scratch_);
    for (std::int64_t r = 0; r < R; ++r)
      std::copy(part + r * vn, part + (r + 1) * vn, out.logits.data() + r * V + vb);
  }
  comm->all_reduce_sum(out.logits.data(), out.logits.size(), DType::kF32);
}

}  // namespace keel::arch
