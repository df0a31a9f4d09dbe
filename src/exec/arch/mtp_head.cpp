#include "exec/arch/mtp_head.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "exec/arch/head_cache_attention.h"
#include "exec/arch/head_output.h"
#include "exec/arch/weight_binding.h"
#include "exec/cpu/activation.h"
#include "exec/cpu/norm.h"
#include "exec/cpu/quant_blocks.h"

namespace keel::arch {

namespace {

// The layer's own tensor when stored (any shape mismatch is an error), else the target's.
TensorView own_or(const WeightLookup &lookup, const std::string &name,
                  std::vector<std::int64_t> shape, const TensorView &fallback) {
  if (lookup(name)) return need_tensor(lookup, name, std::move(shape));
  return fallback;
}

void add_bias(float *y, const std::vector<float> &b, std::int64_t rows) {
  const std::int64_t n = static_cast<std::int64_t>(b.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < n; ++i) y[r * n + i] += b[i];
}

}  // namespace

MtpHead::MtpHead(const ModelConfig &cfg, const WeightLookup &lookup, const TensorView &target_embed,
                 const TensorView &target_head)
    : cfg_(cfg), layer_(cfg.num_layers) {
  require_mtp_layer(cfg);
  const std::int64_t hidden = cfg.hidden_size, V = cfg.vocab_size;
  const std::string p = "model.layers." + std::to_string(layer_) + ".";
  enorm_ = need_vector(lookup, p + "enorm.weight", hidden);
  hnorm_ = need_vector(lookup, p + "hnorm.weight", hidden);
  target_norm_ = need_vector(lookup, "model.norm.weight", hidden);
  eh_proj_ = need_tensor(lookup, p + "eh_proj.weight", {hidden, 2 * hidden});
  head_norm_ = need_vector(lookup, p + "shared_head.norm.weight", hidden);
  embed_ = own_or(lookup, p + "embed_tokens.weight", {V, hidden}, target_embed);
  head_ = own_or(lookup, p + "shared_head.head.weight", {V, hidden}, target_head);
  // The MTP layer is a sparse one when its router is stored (GLM-4.5's and DeepSeek-V3's are).
  const bool sparse = lookup(moe_router_name(*cfg.moe, layer_)).has_value();
  if (cfg.mla) {
    mla_ = std::make_unique<MlaLayer>(bind_mla_layer(cfg, lookup, layer_, sparse));
    rope_ = make_mla_rope(cfg);
  } else {
    block_ = bind_llama_layer(cfg, lookup, layer_, sparse);
    rope_ = cpu::make_rope_table(cfg);
  }
}

void MtpHead::gqa_block(MtpCache &cache, float *x, std::int64_t n, const std::int32_t *pos,
                        ExecContext &ctx) {
  const std::int64_t hidden = cfg_.hidden_size, H = cfg_.num_heads, G = cfg_.num_kv_heads,
                     D = cfg_.head_dim, I = cfg_.intermediate_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  ThreadPool &pool = ctx.pool();
  Workspace &ws = ctx.workspace();
  const LlamaLayer &L = block_;
  float *h = ws.floats(n * hidden);
  float *q = ws.floats(n * H * D), *k = ws.floats(n * G * D), *v = ws.floats(n * G * D);
  cpu::rmsnorm(x, L.attn_norm.data(), h, n, hidden, eps);
  const cpu::LinearJob qkv[] = {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}};
  cpu::linear_multi(qkv, h, n, pool, scratch_);
  if (!L.bq.empty()) {
    add_bias(q, L.bq, n);
    add_bias(k, L.bk, n);
    add_bias(v, L.bv, n);
  }
  if (!L.q_norm.empty()) {
    cpu::rmsnorm(q, L.q_norm.data(), q, n * H, D, eps);
    cpu::rmsnorm(k, L.k_norm.data(), k, n * G, D, eps);
  }
  cpu::apply_rope(rope_, q, n, H, D, pos);
  cpu::apply_rope(rope_, k, n, G, D, pos);
  float *att = ws.floats(n * H * D);
  head_cache_attention(q, k, v, n, H, G, D, pos, cache.rows, att);
  cpu::linear(L.wo, att, n, h, pool, scratch_);
  if (!L.bo.empty()) add_bias(h, L.bo, n);
  for (std::int64_t i = 0; i < n * hidden; ++i) x[i] += h[i];
  cpu::rmsnorm(x, L.ffn_norm.data(), h, n, hidden, eps);
  float *y = ws.floats(n * hidden);
  if (L.moe) {
    L.moe->forward(h, n, y, pool, scratch_, ws);
  } else {
    float *gate = ws.floats(n * I), *up = ws.floats(n * I);
    const cpu::LinearJob gate_up[] = {{&L.w_gate, gate}, {&L.w_up, up}};
    cpu::linear_multi(gate_up, h, n, pool, scratch_);
    cpu::swiglu(gate, up, gate, n * I);
    cpu::linear(L.w_down, gate, n, y, pool, scratch_);
  }
  for (std::int64_t i = 0; i < n * hidden; ++i) x[i] += y[i];
}

void MtpHead::mla_block(MtpCache &cache, float *x, std::int64_t n, const std::int32_t *pos,
                        ExecContext &ctx) {
  const std::int64_t row = cache_row_floats();
  // GLM-5's layer selects with its own indexer (bound by bind_mla_layer: a layer past the
  // decoder's is never a "shared" one) over this cache's index keys; empty without DSA.
  std::vector<std::vector<std::int32_t>> selection(static_cast<std::size_t>(n));
  MlaLayerStep step(
      cfg_, rope_, n, pos,
      [&](std::int64_t, std::int32_t p) { return cache.rows.data() + p * row; }, ctx.workspace());
  step.run(*mla_, x, selection, ctx.pool(), scratch_);
}

void MtpHead::forward(MtpCache &cache, const MtpInput &in, MtpOutput &out, ExecContext &ctx) {
  const std::int64_t n = static_cast<std::int64_t>(in.tokens.size());
  const std::int64_t hidden = cfg_.hidden_size, V = cfg_.vocab_size;
  const std::int64_t row = cache_row_floats();
  check_head_input(cache, in, hidden, V, "mtp");
  ThreadPool &pool = ctx.pool();
  Workspace &ws = ctx.workspace();
  ws.reset();
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  std::vector<std::int32_t> pos(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < n; ++t) pos[t] = in.start_pos + static_cast<std::int32_t>(t);

  // u = eh_proj([enorm(embed(x)) ; hnorm(norm(h))]), norm the target's final one (the
  // vector its LM head reads) for the target's rows, none for a chained h'.
  float *cat = ws.floats(n * 2 * hidden);
  float *e = ws.floats(n * hidden);
  const std::int64_t row_bytes = dtype_bytes(embed_.dtype, hidden);
  for (std::int64_t t = 0; t < n; ++t) {
    if (pos[t] == 0)
      std::fill(e + t * hidden, e + (t + 1) * hidden, 0.0f);
    else
      cpu::dequantize_row(embed_.dtype, embed_.data + in.tokens[t] * row_bytes, e + t * hidden,
                          hidden);
  }
  cpu::rmsnorm(e, enorm_.data(), e, n, hidden, eps);
  float *g = ws.floats(n * hidden);
  if (in.chained) {
    cpu::rmsnorm(in.hidden.data(), hnorm_.data(), g, n, hidden, eps);
  } else {
    cpu::rmsnorm(in.hidden.data(), target_norm_.data(), g, n, hidden, eps);
    cpu::rmsnorm(g, hnorm_.data(), g, n, hidden, eps);
  }
  for (std::int64_t t = 0; t < n; ++t) {
    std::copy(e + t * hidden, e + (t + 1) * hidden, cat + t * 2 * hidden);
    std::copy(g + t * hidden, g + (t + 1) * hidden, cat + t * 2 * hidden + hidden);
  }
  float *x = ws.floats(n * hidden);
  cpu::linear(eh_proj_, cat, n, x, pool, scratch_);

  // The decoder block: attention over this layer's own positions [0, pos].
  cache.length = in.start_pos + static_cast<std::int32_t>(n);
  cache.rows.resize(static_cast<std::size_t>(cache.length * row));
  if (mla_)
    mla_block(cache, x, n, pos.data(), ctx);
  else
    gqa_block(cache, x, n, pos.data(), ctx);

  // h', and the head over shared_head.norm(h') of the rows asked for.
  head_output(x, n, hidden, in, head_norm_, eps, head_, V, ctx, scratch_, out);
}

}  // namespace keel::arch
