#include "exec/arch/eagle3_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "core/error.h"
#include "exec/arch/head_cache_attention.h"
#include "exec/arch/head_output.h"
#include "exec/cpu/activation.h"
#include "exec/cpu/norm.h"
#include "exec/cpu/quant_blocks.h"
#include "formats/safetensors.h"

namespace keel::arch {

namespace {

// Checkpoints name the layer midlayer.* (EAGLE, SpecForge) or layers.0.*, with or without
// a model. prefix (vLLM reads all of them); keel asks by the first form.
std::vector<std::string> aliases(const std::string &name) {
  std::vector<std::string> out{name, "model." + name};
  if (name.starts_with("midlayer.")) {
    const std::string l0 = "layers.0." + name.substr(9);
    out.push_back(l0);
    out.push_back("model." + l0);
  }
  return out;
}

const SafetensorsTensor *find_any(const SafetensorsModel &m, const std::string &name) {
  for (const std::string &n : aliases(name))
    if (const SafetensorsTensor *t = m.find(n)) return t;
  return nullptr;
}

}  // namespace

Eagle3Weights::~Eagle3Weights() = default;

Eagle3Weights::Eagle3Weights(const std::filesystem::path &dir, const ModelConfig &target,
                             const TensorView &target_embed)
    : cfg(load_eagle3_config(dir)) {
  const std::string origin = (dir / "config.json").string();
  const ModelConfig &c = cfg.layer;
  auto bad = [&](const std::string &why) { throw Error(ErrorCode::kFormat, origin + ": " + why); };
  if (c.vocab_size != target.vocab_size)
    bad("vocab_size " + std::to_string(c.vocab_size) + " is not the target's " +
        std::to_string(target.vocab_size));
  if (cfg.target_hidden_size != target.hidden_size)
    bad("target_hidden_size (or hidden_size) " + std::to_string(cfg.target_hidden_size) +
        " is not the target's hidden_size " + std::to_string(target.hidden_size));
  if (c.hidden_size != target.hidden_size)
    bad("hidden_size " + std::to_string(c.hidden_size) + " is not the target's " +
        std::to_string(target.hidden_size));
  try {
    aux = eagle3_aux_layers(cfg, target.num_layers);
  } catch (const Error &e) {
    bad(e.what());
  }
  std::error_code ec;
  if (std::filesystem::exists(dir / "pytorch_model.bin", ec) &&
      !std::filesystem::exists(dir / "model.safetensors", ec) &&
      !std::filesystem::exists(dir / "model.safetensors.index.json", ec))
    throw Error(ErrorCode::kUnsupported,
                (dir / "pytorch_model.bin").string() +
                    ": the head's weights are a PyTorch pickle; keel reads safetensors only "
                    "(convert it, e.g. with safetensors.torch.save_file)");
  files = SafetensorsModel::open(dir);
  WeightLookup lookup = [this](const std::string &name) -> std::optional<TensorView> {
    const SafetensorsTensor *t = find_any(*files, name);
    if (!t) return std::nullopt;
    if (!t->dtype)
      throw Error(ErrorCode::kFormat, name + ": dtype " + t->dtype_name + " is not supported");
    return SafetensorsModel::view(*t, files->origin());
  };
  const std::int64_t H = c.hidden_size, NH = c.num_heads, G = c.num_kv_heads, D = c.head_dim,
                     I = c.intermediate_size, V = c.vocab_size, Vd = cfg.draft_vocab_size;
  const auto A = static_cast<std::int64_t>(aux.size());
  fc = need_tensor(lookup, "fc.weight", {H, A * cfg.target_hidden_size});
  input_norm = need_vector(lookup, "midlayer.input_layernorm.weight", H);
  hidden_norm = need_vector(lookup, "midlayer.hidden_norm.weight", H);
  wq = need_tensor(lookup, "midlayer.self_attn.q_proj.weight", {NH * D, 2 * H});
  wk = need_tensor(lookup, "midlayer.self_attn.k_proj.weight", {G * D, 2 * H});
  wv = need_tensor(lookup, "midlayer.self_attn.v_proj.weight", {G * D, 2 * H});
  wo = need_tensor(lookup, "midlayer.self_attn.o_proj.weight", {H, NH * D});
  post_norm = need_vector(lookup, "midlayer.post_attention_layernorm.weight", H);
  w_gate = need_tensor(lookup, "midlayer.mlp.gate_proj.weight", {I, H});
  w_up = need_tensor(lookup, "midlayer.mlp.up_proj.weight", {I, H});
  w_down = need_tensor(lookup, "midlayer.mlp.down_proj.weight", {H, I});
  norm = need_vector(lookup, "norm.weight", H);
  lm_head = need_tensor(lookup, "lm_head.weight", {Vd, H});
  own_embed = lookup("embed_tokens.weight").has_value();
  if (own_embed)
    embed = need_tensor(lookup, "embed_tokens.weight", {V, H});
  else if (target_embed.shape == std::vector<std::int64_t>{V, H})
    embed = target_embed;
  else
    throw Error(ErrorCode::kFormat,
                "embed_tokens.weight: tensor missing, and the target's embedding is not [vocab, "
                "hidden]");
  // d2t: the target id of draft id d is d + d2t[d] (int64).
  const SafetensorsTensor *file_d2t = find_any(*files, "d2t");
  if (file_d2t == nullptr) {
    if (Vd != V)
      throw Error(ErrorCode::kFormat, "d2t: tensor missing (draft_vocab_size < vocab_size)");
    d2t.assign(static_cast<std::size_t>(V), 0);
  } else {
    if (file_d2t->dtype_name != "I64")
      throw Error(ErrorCode::kFormat,
                  "d2t: dtype " + file_d2t->dtype_name + " where I64 was expected");
    if (file_d2t->shape != std::vector<std::int64_t>{Vd})
      throw Error(ErrorCode::kFormat,
                  "d2t: shape [" +
                      (file_d2t->shape.size() == 1 ? std::to_string(file_d2t->shape[0])
                                                   : std::string("?")) +
                      "] where [" + std::to_string(Vd) + "] (draft_vocab_size) was expected");
    if (file_d2t->nbytes != static_cast<std::size_t>(Vd) * 8)
      throw Error(ErrorCode::kFormat, "d2t: data size does not match its shape");
    d2t.resize(static_cast<std::size_t>(Vd));
    std::memcpy(d2t.data(), file_d2t->data, file_d2t->nbytes);
    for (std::int64_t d = 0; d < Vd; ++d) {
      const std::int64_t id = d + d2t[static_cast<std::size_t>(d)];
      if (id < 0 || id >= V)
        throw Error(ErrorCode::kFormat, "d2t: draft id " + std::to_string(d) + " maps to " +
                                            std::to_string(id) + ", outside the vocabulary");
    }
  }
  for (const TensorView *t : {&fc, &wq, &wk, &wv, &wo, &w_gate, &w_up, &w_down, &lm_head})
    bytes += static_cast<std::int64_t>(t->nbytes);
  bytes += 4 * (4 * H) + static_cast<std::int64_t>(d2t.size()) * 8;
  if (own_embed) bytes += static_cast<std::int64_t>(embed.nbytes);
}

Eagle3Head::Eagle3Head(const std::filesystem::path &dir, const ModelConfig &target,
                       const TensorView &target_embed)
    : w_(dir, target, target_embed), rope_(cpu::make_rope_table(w_.cfg.layer)) {}

void Eagle3Head::forward(MtpCache &cache, const MtpInput &in, MtpOutput &out, ExecContext &ctx) {
  const ModelConfig &c = w_.cfg.layer;
  const std::int64_t n = static_cast<std::int64_t>(in.tokens.size());
  const std::int64_t H = c.hidden_size, NH = c.num_heads, G = c.num_kv_heads, D = c.head_dim,
                     I = c.intermediate_size, V = c.vocab_size;
  const std::int64_t width = in.chained ? H : aux_width();
  const std::int64_t row = cache_row_floats();
  check_head_input(cache, in, width, V, "eagle3");
  if (n == 0) {
    out.hidden.clear();
    out.argmax.clear();
    out.logits.clear();
    return;
  }
  ThreadPool &pool = ctx.pool();
  Workspace &ws = ctx.workspace();
  ws.reset();
  const float eps = static_cast<float>(c.rms_norm_eps);
  std::vector<std::int32_t> pos(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < n; ++t) pos[t] = in.start_pos + static_cast<std::int32_t>(t);

  // g = fc(aux rows), or the chained h'; cat = [input_layernorm(embed) ; hidden_norm(g)].
  float *g = ws.floats(n * H);
  if (in.chained)
    std::copy(in.hidden.begin(), in.hidden.end(), g);
  else
    cpu::linear(w_.fc, in.hidden.data(), n, g, pool, scratch_);
  float *e = ws.floats(n * H);
  const std::int64_t row_bytes = dtype_bytes(w_.embed.dtype, H);
  for (std::int64_t t = 0; t < n; ++t)
    cpu::dequantize_row(w_.embed.dtype, w_.embed.data + in.tokens[t] * row_bytes, e + t * H, H);
  cpu::rmsnorm(e, w_.input_norm.data(), e, n, H, eps);
  float *gn = ws.floats(n * H);
  cpu::rmsnorm(g, w_.hidden_norm.data(), gn, n, H, eps);
  float *cat = ws.floats(n * 2 * H);
  for (std::int64_t t = 0; t < n; ++t) {
    std::copy(e + t * H, e + (t + 1) * H, cat + t * 2 * H);
    std::copy(gn + t * H, gn + (t + 1) * H, cat + t * 2 * H + H);
  }
  float *x = ws.floats(n * H);  // the residual
  std::copy(w_.cfg.norm_before_residual ? gn : g, (w_.cfg.norm_before_residual ? gn : g) + n * H,
            x);

  // Attention over the head's own positions [0, pos].
  float *q = ws.floats(n * NH * D), *k = ws.floats(n * G * D), *v = ws.floats(n * G * D);
  const cpu::LinearJob qkv[] = {{&w_.wq, q}, {&w_.wk, k}, {&w_.wv, v}};
  cpu::linear_multi(qkv, cat, n, pool, scratch_);
  cpu::apply_rope(rope_, q, n, NH, D, pos.data());
  cpu::apply_rope(rope_, k, n, G, D, pos.data());
  cache.length = in.start_pos + static_cast<std::int32_t>(n);
  cache.rows.resize(static_cast<std::size_t>(cache.length * row));
  float *att = ws.floats(n * NH * D);
  head_cache_attention(q, k, v, n, NH, G, D, pos.data(), cache.rows, att);
  float *h = ws.floats(n * H);
  cpu::linear(w_.wo, att, n, h, pool, scratch_);
  for (std::int64_t i = 0; i < n * H; ++i) x[i] += h[i];
  // The MLP.
  cpu::rmsnorm(x, w_.post_norm.data(), h, n, H, eps);
  float *gate = ws.floats(n * I), *up = ws.floats(n * I);
  const cpu::LinearJob gate_up[] = {{&w_.w_gate, gate}, {&w_.w_up, up}};
  cpu::linear_multi(gate_up, h, n, pool, scratch_);
  cpu::swiglu(gate, up, gate, n * I);
  cpu::linear(w_.w_down, gate, n, h, pool, scratch_);
  for (std::int64_t i = 0; i < n * H; ++i) x[i] += h[i];

  // h', and the head over norm(h') of the rows asked for, its ids mapped to the target's.
  head_output(x, n, H, in, w_.norm, eps, w_.lm_head, w_.cfg.draft_vocab_size, ctx, scratch_, out);
  for (TokenId &id : out.argmax) id = target_id(id);
}

}  // namespace keel::arch
