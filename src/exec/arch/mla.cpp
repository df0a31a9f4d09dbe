#include "exec/arch/mla.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "exec/cpu/activation.h"
#include "exec/cpu/norm.h"
#include "exec/cpu/quant_blocks.h"

namespace keel::arch {

namespace {

std::string layer_name(std::int64_t l, const std::string &rest) {
  return "model.layers." + std::to_string(l) + "." + rest;
}

// An optional bias: bound when the file has it (attention_bias), else empty.
std::vector<float> maybe_vector(const WeightLookup &lookup, const std::string &name, std::int64_t n,
                                bool required) {
  if (!required && !lookup(name)) return {};
  return need_vector(lookup, name, n);
}

}  // namespace

MlaLayer bind_mla_layer(const ModelConfig &cfg, const WeightLookup &lookup, std::int64_t l,
                        bool sparse) {
  const MlaConfig &m = *cfg.mla;
  const std::int64_t hidden = cfg.hidden_size, H = cfg.num_heads, I = cfg.intermediate_size;
  const std::int64_t qk = m.qk_head_dim(), nv = m.qk_nope_head_dim + m.v_head_dim;
  const bool bias = cfg.attention_bias;
  MlaLayer L;
  if (m.q_lora_rank > 0) {
    L.q_a = need_tensor(lookup, mla_name(l, "q_a_proj.weight"), {m.q_lora_rank, hidden});
    L.q_a_norm = need_vector(lookup, mla_name(l, "q_a_layernorm.weight"), m.q_lora_rank);
    L.q_b = need_tensor(lookup, mla_name(l, "q_b_proj.weight"), {H * qk, m.q_lora_rank});
    L.b_q_a = maybe_vector(lookup, mla_name(l, "q_a_proj.bias"), m.q_lora_rank, bias);
  } else {
    L.q = need_tensor(lookup, mla_name(l, "q_proj.weight"), {H * qk, hidden});
  }
  const std::int64_t ckv = m.kv_lora_rank + m.qk_rope_head_dim;
  L.kv_a = need_tensor(lookup, mla_name(l, "kv_a_proj_with_mqa.weight"), {ckv, hidden});
  L.b_kv_a = maybe_vector(lookup, mla_name(l, "kv_a_proj_with_mqa.bias"), ckv, bias);
  L.kv_a_norm = need_vector(lookup, mla_name(l, "kv_a_layernorm.weight"), m.kv_lora_rank);
  L.kv_b =
      tensor_f32(need_tensor(lookup, mla_name(l, "kv_b_proj.weight"), {H * nv, m.kv_lora_rank}));
  L.o = need_tensor(lookup, mla_name(l, "o_proj.weight"), {hidden, H * m.v_head_dim});
  L.b_o = maybe_vector(lookup, mla_name(l, "o_proj.bias"), hidden, bias);
  if (m.dsa() && !m.shared_selection(l)) L.indexer = std::make_unique<DsaIndexer>(cfg, l, lookup);
  if (sparse) {
    L.moe = std::make_unique<MoeFfn>(cfg, l, lookup);
  } else {
    L.w_gate = need_tensor(lookup, layer_name(l, "mlp.gate_proj.weight"), {I, hidden});
    L.w_up = need_tensor(lookup, layer_name(l, "mlp.up_proj.weight"), {I, hidden});
    L.w_down = need_tensor(lookup, layer_name(l, "mlp.down_proj.weight"), {hidden, I});
  }
  L.attn_norm = need_vector(lookup, layer_name(l, "input_layernorm.weight"), hidden);
  L.ffn_norm = need_vector(lookup, layer_name(l, "post_attention_layernorm.weight"), hidden);
  return L;
}

cpu::RopeTable make_mla_rope(const ModelConfig &cfg) {
  ModelConfig rope_cfg = cfg;  // the rope part of a head (and of the indexer's)
  rope_cfg.head_dim = cfg.mla->qk_rope_head_dim;
  rope_cfg.partial_rotary_factor = 1.0;
  return cpu::make_rope_table(rope_cfg);
}

MlaModel::MlaModel(const ModelConfig &cfg, const WeightLookup &lookup) : cfg_(cfg) {
  if (!cfg.mla || cfg.kv_layout != KvLayout::kLatent)
    throw Error(ErrorCode::kInternal, "mla: the config has no MLA fields");
  m_ = *cfg.mla;
  const std::int64_t hidden = cfg.hidden_size, H = cfg.num_heads, V = cfg.vocab_size;
  if (hidden <= 0 || H <= 0 || V <= 0 || cfg.num_layers <= 0 || cfg.num_layers > 4096 ||
      hidden > (1 << 20) || V > (1 << 24))
    throw Error(ErrorCode::kFormat, "config: model dimensions out of range");
  embed_ = need_tensor(lookup, "model.embed_tokens.weight", {V, hidden});
  if (embed_.dtype == DType::kF8_E4M3)
    throw Error(ErrorCode::kUnsupported,
                "model.embed_tokens.weight: fp8 embeddings are not "
                "supported (the FP8 releases keep them bf16)");
  if (lookup("lm_head.weight"))
    lm_head_ = need_tensor(lookup, "lm_head.weight", {V, hidden});
  else if (cfg.tie_word_embeddings)
    lm_head_ = embed_;
  else
    throw Error(ErrorCode::kFormat, "lm_head.weight: tensor missing");
  final_norm_ = need_vector(lookup, "model.norm.weight", hidden);
  layers_.reserve(static_cast<std::size_t>(cfg.num_layers));
  for (std::int64_t l = 0; l < cfg.num_layers; ++l)
    layers_.push_back(bind_mla_layer(cfg, lookup, l, cfg.moe && cfg.moe->sparse(l)));
  rope_ = make_mla_rope(cfg);
}

std::int64_t MlaModel::weight_bytes() const {
  std::int64_t b = static_cast<std::int64_t>(lm_head_.nbytes);
  for (const auto &L : layers_) {
    b += static_cast<std::int64_t>(L.q_a.nbytes + L.q_b.nbytes + L.q.nbytes + L.kv_a.nbytes +
                                   L.o.nbytes + L.w_gate.nbytes + L.w_up.nbytes + L.w_down.nbytes) +
         static_cast<std::int64_t>(L.kv_b.size() * sizeof(float));
    if (L.moe) b += L.moe->active_bytes();
    if (L.indexer) b += L.indexer->weight_bytes();
  }
  return b;
}

MlaLayerStep::MlaLayerStep(const ModelConfig &cfg, const cpu::RopeTable &rope, std::int64_t T,
                           const std::int32_t *pos, LatentRowFn row, Workspace &ws)
    : cfg_(cfg), m_(*cfg.mla), rope_(rope), T_(T), pos_(pos), row_(std::move(row)), ws_(ws) {
  const std::int64_t hidden = cfg.hidden_size, H = cfg.num_heads, I = cfg.intermediate_size;
  h_ = ws.floats(T * hidden);                                      // [T, hidden] normed / out
  qr_ = ws.floats(T * std::max<std::int64_t>(m_.q_lora_rank, 1));  // [T, q_lora]
  q_ = ws.floats(T * H * m_.qk_head_dim());                        // [T, H, nope + rope]
  c_ = ws.floats(T * (m_.kv_lora_rank + m_.qk_rope_head_dim));     // [T, kv_lora + rope]
  att_ = ws.floats(T * H * m_.v_head_dim);                         // [T, H, v]
  gate_ = ws.floats(T * I), up_ = ws.floats(T * I);                // [T, I]
  moe_out_ = cfg.moe ? ws.floats(T * hidden) : nullptr;            // [T, hidden]
  ik_ = m_.dsa() ? ws.floats(T * m_.index_head_dim) : nullptr;     // [T, Di]
  iq_ = m_.dsa() ? ws.floats(T * m_.index_n_heads * m_.index_head_dim) : nullptr;  // [T, Hi, Di]
  iw_ = m_.dsa() ? ws.floats(T * m_.index_n_heads) : nullptr;                      // [T, Hi]
}

void MlaLayerStep::attend(const MlaLayer &L, std::vector<std::vector<std::int32_t>> &selection,
                          bool select, ThreadPool &pool) {
  const std::int64_t T = T_, H = cfg_.num_heads;
  const std::int64_t R = m_.kv_lora_rank, rope = m_.qk_rope_head_dim, nope = m_.qk_nope_head_dim,
                     vd = m_.v_head_dim, qk = m_.qk_head_dim();
  auto rows_of = [&](std::int64_t t, std::vector<const float *> &rows) {
    const std::int32_t n = pos_[t] + 1;
    rows.resize(static_cast<std::size_t>(n));
    for (std::int32_t p = 0; p < n; ++p) rows[p] = row_(t, p);
  };
  // The DSA selection of each token, computed in a layer with its own indexer and kept for
  // the "shared" layers after it.
  if (m_.dsa() && select) {
    pool.parallel_for(T, [&](std::int64_t b, std::int64_t e) {
      std::vector<const float *> rows, keys;
      std::vector<float> scores;
      for (std::int64_t t = b; t < e; ++t) {
        rows_of(t, rows);
        keys.resize(rows.size());
        for (std::size_t i = 0; i < rows.size(); ++i) keys[i] = rows[i] + R + rope;
        L.indexer->select(iq_ + t * m_.index_n_heads * m_.index_head_dim,
                          iw_ + t * m_.index_n_heads, keys, static_cast<std::int64_t>(rows.size()),
                          selection[t], scores);
      }
    });
  }
  const float scale = static_cast<float>(m_.softmax_scale);
  pool.parallel_for(T * H, [&](std::int64_t b, std::int64_t e) {
    std::vector<const float *> rows;
    std::vector<float> qa(static_cast<std::size_t>(R)), lat(static_cast<std::size_t>(R)), p;
    std::int64_t rows_t = -1;
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t t = i / H, h = i % H;
      if (t != rows_t) rows_of(t, rows), rows_t = t;
      const float *qn = q_ + (t * H + h) * qk, *qr = qn + nope;
      const float *wk = L.kv_b.data() + h * (nope + vd) * R;  // [nope, R]
      const float *wv = wk + nope * R;                        // [vd, R]
      std::fill(qa.begin(), qa.end(), 0.0f);
      for (std::int64_t d = 0; d < nope; ++d) {
        const float a = qn[d];
        const float *w = wk + d * R;
        for (std::int64_t j = 0; j < R; ++j) qa[j] += a * w[j];
      }
      const bool sparse = m_.dsa() && !selection[t].empty();
      const std::int64_t n = sparse ? static_cast<std::int64_t>(selection[t].size())
                                    : static_cast<std::int64_t>(rows.size());
      p.resize(static_cast<std::size_t>(n));
      float mx = -INFINITY;
      for (std::int64_t k = 0; k < n; ++k) {
        const float *c = rows[sparse ? selection[t][k] : k];
        float s = 0;
        for (std::int64_t j = 0; j < R; ++j) s += qa[j] * c[j];
        for (std::int64_t j = 0; j < rope; ++j) s += qr[j] * c[R + j];
        p[k] = s * scale;
        mx = std::max(mx, p[k]);
      }
      double sum = 0;
      for (std::int64_t k = 0; k < n; ++k) sum += (p[k] = std::exp(p[k] - mx));
      const float inv = static_cast<float>(1.0 / sum);
      std::fill(lat.begin(), lat.end(), 0.0f);
      for (std::int64_t k = 0; k < n; ++k) {
        const float *c = rows[sparse ? selection[t][k] : k];
        const float w = p[k] * inv;
        for (std::int64_t j = 0; j < R; ++j) lat[j] += w * c[j];
      }
      float *o = att_ + (t * H + h) * vd;
      for (std::int64_t d = 0; d < vd; ++d) {
        const float *w = wv + d * R;
        float s = 0;
        for (std::int64_t j = 0; j < R; ++j) s += w[j] * lat[j];
        o[d] = s;
      }
    }
  });
}

void MlaLayerStep::run(const MlaLayer &L, float *x,
                       std::vector<std::vector<std::int32_t>> &selection, ThreadPool &pool,
                       cpu::LinearScratch &scratch) {
  const std::int64_t T = T_, hidden = cfg_.hidden_size, H = cfg_.num_heads,
                     I = cfg_.intermediate_size;
  const std::int64_t R = m_.kv_lora_rank, rope = m_.qk_rope_head_dim, qk = m_.qk_head_dim(),
                     ckv = R + rope, Di = m_.index_head_dim, W = m_.latent_values();
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  auto add_bias = [](float *y, const std::vector<float> &b, std::int64_t rows) {
    const std::int64_t n = static_cast<std::int64_t>(b.size());
    for (std::int64_t r = 0; r < rows && n > 0; ++r)
      for (std::int64_t i = 0; i < n; ++i) y[r * n + i] += b[i];
  };
  float *h = h_;
  cpu::rmsnorm(x, L.attn_norm.data(), h, T, hidden, eps);
  // Query: through the q latent (normed) or directly; its rope part roped.
  if (m_.q_lora_rank > 0) {
    cpu::linear(L.q_a, h, T, qr_, pool, scratch);
    add_bias(qr_, L.b_q_a, T);
    cpu::rmsnorm(qr_, L.q_a_norm.data(), qr_, T, m_.q_lora_rank, eps);
    cpu::linear(L.q_b, qr_, T, q_, pool, scratch);
  } else {
    cpu::linear(L.q, h, T, q_, pool, scratch);
  }
  cpu::apply_rope(rope_, q_ + m_.qk_nope_head_dim, T, H, qk, pos_);
  // The latent row: normed kv latent, roped key part.
  cpu::linear(L.kv_a, h, T, c_, pool, scratch);
  add_bias(c_, L.b_kv_a, T);
  for (std::int64_t t = 0; t < T; ++t)
    cpu::rmsnorm(c_ + t * ckv, L.kv_a_norm.data(), c_ + t * ckv, 1, R, eps);
  cpu::apply_rope(rope_, c_ + R, T, 1, ckv, pos_);
  if (L.indexer) {
    L.indexer->keys(h, T, pos_, rope_, ik_, pool, scratch);
    L.indexer->queries(h, qr_, T, pos_, rope_, iq_, iw_, pool, scratch);
  }
  for (std::int64_t t = 0; t < T; ++t) {  // [c | k_rope | index key] into the cache
    float *row = row_(t, pos_[t]);
    std::copy(c_ + t * ckv, c_ + (t + 1) * ckv, row);
    if (m_.dsa()) {
      if (L.indexer)
        std::copy(ik_ + t * Di, ik_ + (t + 1) * Di, row + ckv);
      else
        std::fill(row + ckv, row + W, 0.0f);  // a "shared" layer keeps no index key
    }
  }
  attend(L, selection, L.indexer != nullptr, pool);
  cpu::linear(L.o, att_, T, h, pool, scratch);
  add_bias(h, L.b_o, T);
  for (std::int64_t i = 0; i < T * hidden; ++i) x[i] += h[i];
  cpu::rmsnorm(x, L.ffn_norm.data(), h, T, hidden, eps);
  if (L.moe) {
    L.moe->forward(h, T, moe_out_, pool, scratch, ws_);
    for (std::int64_t i = 0; i < T * hidden; ++i) x[i] += moe_out_[i];
  } else {
    const cpu::LinearJob gate_up[] = {{&L.w_gate, gate_}, {&L.w_up, up_}};
    cpu::linear_multi(gate_up, h, T, pool, scratch);
    cpu::swiglu(gate_, up_, gate_, T * I);
    cpu::linear(L.w_down, gate_, T, h, pool, scratch);
    for (std::int64_t i = 0; i < T * hidden; ++i) x[i] += h[i];
  }
}

void MlaModel::forward(const ForwardBatch &batch, ForwardOutput &out, cpu::CpuKvStore &kv,
                       ExecContext &ctx, LlamaModel::Head head) {
  const std::int64_t W = latent_values();
  if (kv.row_floats() != W || kv.planes() != 1)
    throw Error(ErrorCode::kInternal, "mla: the KV cache is not a latent cache of this model");
  check_forward_batch(batch, kv.num_blocks(), kv.block_size(), cfg_.vocab_size);
  if (batch.want_hidden && !batch.hidden_layers.empty())
    throw Error(ErrorCode::kUnsupported,
                "mla: multi-head latent attention models do not return chosen layers' hidden "
                "rows yet (EAGLE-3)");
  ThreadPool &pool = ctx.pool();
  Workspace &ws = ctx.workspace();
  ws.reset();
  const std::int64_t T = batch.total_tokens();
  const std::int64_t hidden = cfg_.hidden_size, V = cfg_.vocab_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const std::int32_t bs = kv.block_size();

  std::vector<std::int32_t> token_seq(T), token_pos(T);
  for (std::size_t i = 0; i < batch.seqs.size(); ++i) {
    const auto &s = batch.seqs[i];
    for (std::int32_t j = 0; j < s.num_tokens; ++j) {
      token_seq[s.token_offset + j] = static_cast<std::int32_t>(i);
      token_pos[s.token_offset + j] = s.start_pos + j;
    }
  }
  float *x = ws.floats(T * hidden);  // [T, hidden] residual
  std::vector<std::vector<std::int32_t>> selection(static_cast<std::size_t>(T));
  const std::int64_t row_bytes = dtype_bytes(embed_.dtype, hidden);
  for (std::int64_t t = 0; t < T; ++t)
    cpu::dequantize_row(embed_.dtype, embed_.data + batch.tokens[t] * row_bytes, x + t * hidden,
                        hidden);
  std::int64_t layer = 0;  // the layer the row function reads and writes
  MlaLayerStep step(
      cfg_, rope_, T, token_pos.data(),
      [&](std::int64_t t, std::int32_t p) {
        const SequenceSlice &s = batch.seqs[static_cast<std::size_t>(token_seq[t])];
        return kv.row(batch.block_table[s.block_offset + p / bs], layer, 0, p % bs);
      },
      ws);
  for (layer = 0; layer < cfg_.num_layers; ++layer)
    step.run(layers_[static_cast<std::size_t>(layer)], x, selection, pool, lin_scratch_);

  if (batch.want_hidden)
    out.hidden.assign(x, x + T * hidden);
  else
    out.hidden.clear();
  out.vocab_size = static_cast<std::int32_t>(V);
  const std::vector<std::int64_t> rows = logit_rows(batch, out);
  const std::int64_t Rr = static_cast<std::int64_t>(rows.size());
  const bool greedy_ids = head == LlamaModel::Head::kGreedyIds;
  out.logits.resize(static_cast<std::size_t>(greedy_ids ? 0 : Rr * V));
  out.sampled.assign(greedy_ids ? static_cast<std::size_t>(Rr) : 0, 0);
  out.sampled_logprobs.assign(greedy_ids ? static_cast<std::size_t>(Rr) : 0, 0.0f);
  if (Rr == 0) return;
  float *sel = ws.floats(Rr * hidden);  // [rows, hidden]
  for (std::int64_t r = 0; r < Rr; ++r)
    std::copy(x + rows[r] * hidden, x + (rows[r] + 1) * hidden, sel + r * hidden);
  cpu::rmsnorm(sel, final_norm_.data(), sel, Rr, hidden, eps);
  if (greedy_ids)
    cpu::linear_argmax(lm_head_, sel, Rr, out.sampled.data(), pool, lin_scratch_);
  else
    cpu::linear(lm_head_, sel, Rr, out.logits.data(), pool, lin_scratch_);
}

}  // namespace keel::arch
