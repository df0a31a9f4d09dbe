#include "formats/model_weights.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <set>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/gpt_oss_layout.h"
#include "formats/mxfp4.h"
#include "formats/quant.h"
#include "formats/safetensors.h"

namespace keel {

namespace {

// Per-layer suffixes: GGUF's and HF's.
constexpr std::array<std::pair<std::string_view, std::string_view>, 31> kLayerNames = {{
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"attn_rot_embd", "self_attn.rotary_emb.inv_freq"},
    {"ffn_gate_inp.weight", "mlp.gate.weight"},
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias"},
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    // gpt-oss (read only: writers name the norm ffn_norm, the entry above).
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"attn_sinks.weight", "self_attn.sinks"},
    {"ffn_gate_inp.bias", "mlp.gate.bias"},
    // deepseek2 (multi-head latent attention; attn_q is q_proj without a q LoRA rank).
    {"attn_q_a.weight", "self_attn.q_a_proj.weight"},
    {"attn_q_a_norm.weight", "self_attn.q_a_layernorm.weight"},
    {"attn_q_b.weight", "self_attn.q_b_proj.weight"},
    {"attn_kv_a_mqa.weight", "self_attn.kv_a_proj_with_mqa.weight"},
    {"attn_kv_a_norm.weight", "self_attn.kv_a_layernorm.weight"},
    {"attn_kv_b.weight", "self_attn.kv_b_proj.weight"},
}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kGlobalNames = {{
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
}};

// Splits "<prefix><N>.<rest>" into N and rest.
bool split_layer(std::string_view name, std::string_view prefix, int &layer,
                 std::string_view &rest) {
  if (!name.starts_with(prefix)) return false;
  name.remove_prefix(prefix.size());
  const auto dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  auto [p, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || p != name.data() + dot) return false;
  rest = name.substr(dot + 1);
  return true;
}

std::string shape_str(const std::vector<std::int64_t> &s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

std::string ModelWeights::hf_name_from_gguf(std::string_view g) {
  for (const auto &[gg, hf] : kGlobalNames)
    if (g == gg) return std::string(hf);
  int layer = 0;
  std::string_view rest;
  if (split_layer(g, "blk.", layer, rest)) {
    for (const auto &[gg, hf] : kLayerNames)
      if (rest == gg) return "model.layers." + std::to_string(layer) + "." + std::string(hf);
  }
  return std::string(g);
}

std::string ModelWeights::gguf_name_from_hf(std::string_view h) {
  for (const auto &[gg, hf] : kGlobalNames)
    if (h == hf) return std::string(gg);
  int layer = 0;
  std::string_view rest;
  if (split_layer(h, "model.layers.", layer, rest)) {
    for (const auto &[gg, hf] : kLayerNames)
      if (rest == hf) return "blk." + std::to_string(layer) + "." + std::string(gg);
  }
  return std::string(h);
}

ModelWeights::~ModelWeights() = default;

std::unique_ptr<ModelWeights> ModelWeights::open(const std::filesystem::path &path) {
  namespace fs = std::filesystem;
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  w->path_ = path;
  fs::path gguf_path;
  if (fs::is_directory(path)) {
    if (!fs::exists(path / "config.json")) {
      for (const auto &e : fs::directory_iterator(path)) {
        if (e.path().extension() != ".gguf") continue;
        if (!gguf_path.empty())
          throw Error(ErrorCode::kInvalidArgument,
                      path.string() + ": several .gguf files and no config.json: name one");
        gguf_path = e.path();
      }
      if (gguf_path.empty())
        throw Error(ErrorCode::kNotFound, path.string() + ": no config.json and no .gguf file");
    }
  } else if (!fs::exists(path)) {
    throw Error(ErrorCode::kNotFound, path.string() + ": no such file or directory");
  } else {
    gguf_path = path;
  }

  if (!gguf_path.empty()) {
    w->format_ = Format::kGguf;
    w->path_ = gguf_path;
    w->tokenizer_path_ = gguf_path;
    w->gguf_ = GgufFile::open(gguf_path);
    w->config_ = config_from_gguf(*w->gguf_);
    for (const auto &t : w->gguf_->tensors()) {
      if (w->config_.moe && w->split_stacked_experts(t, gguf_path.string())) continue;
      std::string hf = hf_name_from_gguf(t.name);
      if (t.supported())
        w->tensors_.emplace(std::move(hf), GgufFile::view(t, gguf_path.string()));
      else
        w->unsupported_.emplace(std::move(hf),
                                gguf_path.string() + ": " + t.name + ": tensor type " +
                                    std::string(ggml_type_name(t.ggml_type)) + " is not supported");
    }
    if (w->config_.mla) w->join_split_kv_b();
  } else {
    w->format_ = Format::kSafetensors;
    w->tokenizer_path_ = path;
    w->config_ = load_hf_config(path);
    w->safetensors_ = SafetensorsModel::open(path);
    for (const auto &f : w->safetensors_->files()) {
      for (const auto &t : f->tensors()) {
        if (auto mx = w->load_mxfp4_pair(t, f->path())) {
          if (w->take_gpt_oss_tensor(*mx, f->path())) continue;
          if (!(w->config_.moe && w->split_fused_experts(*mx, f->path())))
            w->tensors_.emplace(mx->name, *mx);
          continue;
        }
        // A pair's scales are read with its blocks.
        if (t.name.ends_with("_scales") &&
            w->safetensors_->find(t.name.substr(0, t.name.size() - 7) + "_blocks"))
          continue;
        if (t.dtype && w->take_gpt_oss_tensor(SafetensorsModel::view(t, f->path()), f->path()))
          continue;
        if (t.dtype && w->config_.moe &&
            w->split_fused_experts(SafetensorsModel::view(t, f->path()), f->path()))
          continue;
        if (t.dtype)
          w->tensors_.emplace(t.name, SafetensorsModel::view(t, f->path()));
        else
          w->unsupported_.emplace(
              t.name, f->path() + ": " + t.name + ": dtype " + t.dtype_name + " is not supported");
      }
    }
  }
  w->attach_fp8_scales();
  w->check_shapes();
  return w;
}

void ModelWeights::attach_fp8_scales() {
  const std::string origin = path_.string();
  const std::int64_t br = config_.fp8 ? config_.fp8->block_rows : 128,
                     bc = config_.fp8 ? config_.fp8->block_cols : 128;
  for (auto &[name, t] : tensors_) {
    if (t.dtype != DType::kF8_E4M3) continue;
    const std::string where = origin + ": " + name;
    if (t.shape.size() != 2)
      throw Error(ErrorCode::kFormat,
                  where + ": an fp8 tensor must be a 2-D linear weight, not " + shape_str(t.shape));
    const std::int64_t N = t.shape[0], K = t.shape[1];
    const TensorView *s = nullptr;
    std::string sname;
    for (const char *suffix : {"_scale_inv", "_scale"}) {
      sname = name + suffix;
      if (auto it = tensors_.find(sname); it != tensors_.end()) {
        s = &it->second;
        break;
      }
      if (auto u = unsupported_.find(sname); u != unsupported_.end())
        throw Error(ErrorCode::kUnsupported, u->second);
    }
    if (!s)
      throw Error(ErrorCode::kFormat, where + ": fp8 weight without its scale (" + name +
                                          "_scale_inv or " + name + "_scale)");
    if (s->dtype != DType::kF32 && s->dtype != DType::kBF16 && s->dtype != DType::kF16)
      throw Error(ErrorCode::kFormat, origin + ": " + sname +
                                          ": scales must be f32, bf16 or f16, not " +
                                          std::string(dtype_name(s->dtype)));
    const std::int64_t gr = (N + br - 1) / br, gc = (K + bc - 1) / bc;
    TensorScale sc;
    const auto &ss = s->shape;
    if (s->numel() == 1 && ss.size() <= 2) {  // per tensor: [], [1] or [1, 1]
      sc = {nullptr, 1, 1, N, K};
    } else if ((ss.size() == 1 && ss[0] == N) || (ss.size() == 2 && ss[0] == N && ss[1] == 1)) {
      sc = {nullptr, N, 1, 1, K};  // per output channel
    } else if (ss.size() == 2 && ss[0] == gr && ss[1] == gc) {
      sc = {nullptr, gr, gc, br, bc};  // blocks, the last ones possibly partial
    } else {
      throw Error(ErrorCode::kFormat,
                  origin + ": " + sname + ": shape " + shape_str(ss) +
                      " fits no fp8 scale layout of " + name + " " + shape_str(t.shape) +
                      ": per tensor [] or [1], per channel [" + std::to_string(N) + "] or [" +
                      std::to_string(N) + ", 1], or " + std::to_string(br) + " x " +
                      std::to_string(bc) + " blocks [" + std::to_string(gr) + ", " +
                      std::to_string(gc) + "]");
    }
    std::vector<float> &f = fp8_scales_[name];
    f.resize(static_cast<std::size_t>(s->numel()));
    dequantize_row(s->dtype, s->data, f.data(), s->numel());  // copies: files need not align f32
    for (float v : f)
      if (!std::isfinite(v))
        throw Error(ErrorCode::kFormat, origin + ": " + sname + ": a scale is not finite");
    sc.data = f.data();
    t.scale = sc;
  }
}

void ModelWeights::join_split_kv_b() {
  const MlaConfig &m = *config_.mla;
  const std::int64_t H = config_.num_heads, R = m.kv_lora_rank, nope = m.qk_nope_head_dim,
                     vd = m.v_head_dim;
  for (std::int64_t l = 0; l < config_.num_layers; ++l) {
    const std::string kv_b = mla_name(l, "kv_b_proj.weight");
    const std::string blk = "blk." + std::to_string(l) + ".";
    const TensorView *kb = find(blk + "attn_k_b.weight");
    const TensorView *vb = find(blk + "attn_v_b.weight");
    if (find(kv_b) || (!kb && !vb)) continue;  // attn_kv_b kept, or missing (named later)
    const std::string origin = path_.string() + ": " + blk;
    if (!kb || !vb) throw Error(ErrorCode::kFormat, origin + "attn_k_b and attn_v_b come together");
    if (kb->shape != std::vector<std::int64_t>{H, R, nope} ||
        vb->shape != std::vector<std::int64_t>{H, vd, R})
      throw Error(ErrorCode::kFormat, origin + "attn_k_b " + shape_str(kb->shape) + " / attn_v_b " +
                                          shape_str(vb->shape) + ": the config implies " +
                                          shape_str({H, R, nope}) + " / " + shape_str({H, vd, R}));
    std::vector<float> k(static_cast<std::size_t>(kb->numel())),
        v(static_cast<std::size_t>(vb->numel()));
    dequantize_row(kb->dtype, kb->data, k.data(), kb->numel());
    dequantize_row(vb->dtype, vb->data, v.data(), vb->numel());
    const std::int64_t rows = H * (nope + vd);
    owned_.emplace_back(new std::byte[static_cast<std::size_t>(rows * R) * sizeof(float)]);
    float *out = reinterpret_cast<float *>(owned_.back().get());
    for (std::int64_t h = 0; h < H; ++h) {
      float *dst = out + h * (nope + vd) * R;
      for (std::int64_t i = 0; i < nope; ++i)  // k_b[h] is [R, nope]: transpose
        for (std::int64_t j = 0; j < R; ++j) dst[i * R + j] = k[(h * R + j) * nope + i];
      std::copy(v.begin() + h * vd * R, v.begin() + (h + 1) * vd * R, dst + nope * R);
    }
    TensorView t;
    t.name = kv_b;
    t.dtype = DType::kF32;
    t.shape = {rows, R};
    t.data = owned_.back().get();
    t.nbytes = static_cast<std::size_t>(rows * R) * sizeof(float);
    tensors_.emplace(kv_b, t);
  }
}

bool ModelWeights::split_stacked_experts(const GgufTensorInfo &t, const std::string &file) {
  int layer = 0;
  std::string_view rest;
  if (!split_layer(t.name, "blk.", layer, rest)) return false;
  ExpertMatrix which;
  // gpt-oss also stacks the experts' biases, [E, n].
  const bool bias = rest.ends_with(".bias");
  if (rest == "ffn_gate_exps.weight" || rest == "ffn_gate_exps.bias") {
    which = ExpertMatrix::kGate;
  } else if (rest == "ffn_up_exps.weight" || rest == "ffn_up_exps.bias") {
    which = ExpertMatrix::kUp;
  } else if (rest == "ffn_down_exps.weight" || rest == "ffn_down_exps.bias") {
    which = ExpertMatrix::kDown;
  } else {
    return false;
  }
  auto keel_name = [&](std::int64_t e) {
    return bias ? moe_expert_bias_name(*config_.moe, layer, e, which)
                : moe_expert_name(*config_.moe, layer, e, which);
  };
  const MoeConfig &m = *config_.moe;
  const std::string origin = file + ": " + t.name;
  if (!t.supported()) {
    unsupported_.emplace(
        keel_name(0),
        origin + ": tensor type " + std::string(ggml_type_name(t.ggml_type)) + " is not supported");
    return true;
  }
  // [E, rows, cols]: expert e is rows x cols contiguous elements ([E, n] for biases).
  const TensorView all = GgufFile::view(t, file);
  if (all.shape.size() != (bias ? 2u : 3u) || all.shape[0] != m.num_experts)
    throw Error(ErrorCode::kFormat, origin + ": shape " + shape_str(all.shape) + ", expected [" +
                                        std::to_string(m.num_experts) +
                                        (bias ? ", n]" : ", rows, cols]"));
  const std::vector<std::int64_t> one(all.shape.begin() + 1, all.shape.end());
  std::int64_t elems = 1;
  for (const std::int64_t d : one) elems *= d;
  const std::int64_t per = dtype_bytes(all.dtype, elems);
  for (std::int64_t e = 0; e < all.shape[0]; ++e) {
    TensorView v = all;
    v.name = keel_name(e);
    v.shape = one;
    v.data = all.data + e * per;
    v.nbytes = static_cast<std::size_t>(per);
    tensors_.emplace(v.name, v);
  }
  return true;
}

bool ModelWeights::split_fused_experts(const TensorView &all, const std::string &file) {
  int layer = 0;
  std::string_view rest;
  if (!split_layer(all.name, "model.layers.", layer, rest)) return false;
  const bool gate_up = rest == "mlp.experts.gate_up_proj";
  if (!gate_up && rest != "mlp.experts.down_proj") return false;
  const MoeConfig &m = *config_.moe;
  if (all.shape.size() != 3 || all.shape[0] != m.num_experts || (gate_up && all.shape[1] % 2))
    throw Error(ErrorCode::kFormat, file + ": " + all.name + ": shape " + shape_str(all.shape) +
                                        ", expected [" + std::to_string(m.num_experts) +
                                        (gate_up ? ", 2 x I, hidden]" : ", hidden, I]"));
  // gate_up_proj: [E, 2I, hidden], each expert's gate rows then its up rows;
  // down_proj: [E, hidden, I].
  const std::int64_t rows = gate_up ? all.shape[1] / 2 : all.shape[1], cols = all.shape[2];
  const std::int64_t part = dtype_bytes(all.dtype, rows * cols);
  for (std::int64_t e = 0; e < all.shape[0]; ++e) {
    for (int j = 0; j < (gate_up ? 2 : 1); ++j) {
      TensorView v = all;
      v.name = moe_expert_name(
          m, layer, e,
          !gate_up ? ExpertMatrix::kDown : (j == 0 ? ExpertMatrix::kGate : ExpertMatrix::kUp));
      v.shape = {rows, cols};
      v.data = all.data + (e * (gate_up ? 2 : 1) + j) * part;
      v.nbytes = static_cast<std::size_t>(part);
      tensors_.emplace(v.name, v);
    }
  }
  return true;
}

bool ModelWeights::take_gpt_oss_tensor(const TensorView &t, const std::string &file) {
  auto split = split_gpt_oss_tensor(t, config_, file);
  if (!split) return false;
  // A repacked MXFP4 tensor (the last owned buffer) that no view points into any more
  // (gate_up, copied row by row) is freed.
  if (!owned_.empty() && t.data == owned_.back().get()) {
    bool used = false;
    for (const TensorView &v : split->views)
      used = used || (v.data >= t.data && v.data < t.data + t.nbytes);
    if (!used) owned_.pop_back();
  }
  for (auto &o : split->owned) owned_.push_back(std::move(o));
  for (TensorView &v : split->views) {
    const std::string name = v.name;
    if (!tensors_.emplace(name, std::move(v)).second)
      throw Error(ErrorCode::kFormat, file + ": " + t.name + ": " + name + " is stored twice");
  }
  return true;
}

std::optional<TensorView> ModelWeights::load_mxfp4_pair(const SafetensorsTensor &t,
                                                        const std::string &file) {
  if (!t.name.ends_with("_blocks")) return std::nullopt;
  const std::string base = t.name.substr(0, t.name.size() - 7);
  const std::string origin = file + ": " + t.name;
  const SafetensorsTensor *s = safetensors_->find(base + "_scales");
  if (!s)
    throw Error(ErrorCode::kFormat,
                origin + ": MXFP4 blocks without their scales tensor " + base + "_scales");
  if (t.dtype_name != "U8" || s->dtype_name != "U8")
    throw Error(ErrorCode::kFormat, origin + ": MXFP4 blocks and scales must be U8, got " +
                                        t.dtype_name + " and " + s->dtype_name);
  // blocks [..., rows, cols / 32, 16], scales [..., rows, cols / 32].
  if (t.shape.size() < 2 || t.shape.back() != 16 ||
      std::vector<std::int64_t>(t.shape.begin(), t.shape.end() - 1) != s->shape)
    throw Error(ErrorCode::kFormat, origin + ": shape " + shape_str(t.shape) +
                                        " does not hold blocks of 32 (16 bytes)" +
                                        " for the scales " + shape_str(s->shape) + " of " + base +
                                        "_scales");
  TensorView v;
  v.name = base;
  v.dtype = DType::kMXFP4;
  v.shape = s->shape;
  v.shape.back() *= kMxfp4BlockElems;
  const std::int64_t blocks = static_cast<std::int64_t>(s->nbytes);
  v.nbytes = static_cast<std::size_t>(blocks * kMxfp4BlockBytes);
  owned_.emplace_back(new std::byte[v.nbytes]);  // every byte is written below
  repack_gpt_oss_mxfp4(reinterpret_cast<const std::uint8_t *>(t.data),
                       reinterpret_cast<const std::uint8_t *>(s->data), owned_.back().get(),
                       blocks);
  v.data = owned_.back().get();
  return v;
}

void ModelWeights::check_shapes() const {
  const ModelConfig &c = config_;
  const std::string origin = path_.string();
  auto expect = [&](const std::string &name, std::vector<std::int64_t> shape, bool required) {
    const TensorView *t = find(name);
    if (!t) {
      if (auto u = unsupported_.find(name); u != unsupported_.end())
        throw Error(ErrorCode::kUnsupported, u->second);
      if (required) {
        const std::string stored = c.arch == Arch::kGptOss ? gpt_oss_stored_name(name) : "";
        throw Error(ErrorCode::kFormat, origin + ": missing tensor " + name +
                                            (stored.empty() ? "" : " (stored in " + stored + ")"));
      }
      return;
    }
    if (t->shape != shape)
      throw Error(ErrorCode::kFormat, origin + ": " + name + ": shape " + shape_str(t->shape) +
                                          ", the config implies " + shape_str(shape));
  };
  const std::int64_t h = c.hidden_size, q = c.num_heads * c.head_dim,
                     kv = c.num_kv_heads * c.head_dim;
  expect("model.embed_tokens.weight", {c.vocab_size, h}, true);
  expect("model.norm.weight", {h}, true);
  expect("lm_head.weight", {c.vocab_size, h}, true);
  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    if (c.mla) {
      // Multi-head latent attention (formats/mla_config.h): a LoRA rank that does not match
      // the file, or a missing indexer tensor, is named here.
      const MlaConfig &m = *c.mla;
      const std::int64_t H = c.num_heads, qk = m.qk_head_dim();
      if (m.q_lora_rank > 0) {
        expect(mla_name(l, "q_a_proj.weight"), {m.q_lora_rank, h}, true);
        expect(mla_name(l, "q_a_layernorm.weight"), {m.q_lora_rank}, true);
        expect(mla_name(l, "q_b_proj.weight"), {H * qk, m.q_lora_rank}, true);
      } else {
        expect(mla_name(l, "q_proj.weight"), {H * qk, h}, true);
      }
      expect(mla_name(l, "kv_a_proj_with_mqa.weight"), {m.kv_lora_rank + m.qk_rope_head_dim, h},
             true);
      expect(mla_name(l, "kv_a_layernorm.weight"), {m.kv_lora_rank}, true);
      expect(mla_name(l, "kv_b_proj.weight"),
             {H * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}, true);
      expect(mla_name(l, "o_proj.weight"), {h, H * m.v_head_dim}, true);
      if (m.dsa() && !m.shared_selection(l)) {  // a "shared" layer has no indexer
        const std::int64_t Hi = m.index_n_heads, Di = m.index_head_dim;
        expect(mla_name(l, "indexer.wq_b.weight"), {Hi * Di, m.q_lora_rank}, true);
        expect(mla_name(l, "indexer.wk.weight"), {Di, h}, true);
        expect(mla_name(l, "indexer.k_norm.weight"), {Di}, true);
        expect(mla_name(l, "indexer.k_norm.bias"), {Di}, true);
        expect(mla_name(l, "indexer.weights_proj.weight"), {Hi, h}, true);
      }
    } else {
      expect(p + "self_attn.q_proj.weight", {q, h}, true);
      expect(p + "self_attn.k_proj.weight", {kv, h}, true);
      expect(p + "self_attn.v_proj.weight", {kv, h}, true);
      expect(p + "self_attn.o_proj.weight", {h, q}, true);
      expect(p + "self_attn.q_proj.bias", {q}, c.attention_bias);
      expect(p + "self_attn.k_proj.bias", {kv}, c.attention_bias);
      expect(p + "self_attn.v_proj.bias", {kv}, c.attention_bias);
      expect(p + "self_attn.o_proj.bias", {h}, c.attention_out_bias);
      expect(attention_sinks_name(l), {c.num_heads}, c.attention_sinks);
      expect(p + "self_attn.q_norm.weight", {c.head_dim}, c.qk_norm);
      expect(p + "self_attn.k_norm.weight", {c.head_dim}, c.qk_norm);
    }
    expect(p + "input_layernorm.weight", {h}, true);
    expect(p + "post_attention_layernorm.weight", {h}, true);
    if (c.moe && c.moe->sparse(l)) {
      const MoeConfig &m = *c.moe;
      const std::int64_t I = m.expert_intermediate;
      expect(moe_router_name(m, l), {m.num_experts, h}, true);
      for (std::int64_t e = 0; e < m.num_experts; ++e) {
        expect(moe_expert_name(m, l, e, ExpertMatrix::kGate), {I, h}, true);
        expect(moe_expert_name(m, l, e, ExpertMatrix::kUp), {I, h}, true);
        expect(moe_expert_name(m, l, e, ExpertMatrix::kDown), {h, I}, true);
      }
      if (m.scoring == MoeConfig::Scoring::kSigmoid)
        expect(moe_router_bias_name(m, l), {m.num_experts}, true);
      expect(moe_router_logit_bias_name(m, l), {m.num_experts}, m.router_bias);
      if (m.expert_bias)
        for (std::int64_t e = 0; e < m.num_experts; ++e) {
          expect(moe_expert_bias_name(m, l, e, ExpertMatrix::kGate), {I}, true);
          expect(moe_expert_bias_name(m, l, e, ExpertMatrix::kUp), {I}, true);
          expect(moe_expert_bias_name(m, l, e, ExpertMatrix::kDown), {h}, true);
        }
      if (const std::int64_t S = m.shared_intermediate; S > 0) {
        expect(moe_shared_name(m, l, ExpertMatrix::kGate), {S, h}, true);
        expect(moe_shared_name(m, l, ExpertMatrix::kUp), {S, h}, true);
        expect(moe_shared_name(m, l, ExpertMatrix::kDown), {h, S}, true);
      }
      // More experts stored than the config says means the config is not this
      // checkpoint's: refuse rather than route over a subset.
      if (find(moe_expert_name(m, l, m.num_experts, ExpertMatrix::kGate)))
        throw Error(ErrorCode::kFormat,
                    origin + ": " + moe_expert_name(m, l, m.num_experts, ExpertMatrix::kGate) +
                        ": an expert beyond the config's " + std::to_string(m.num_experts));
      continue;
    }
    expect(p + "mlp.gate_proj.weight", {c.intermediate_size, h}, true);
    expect(p + "mlp.up_proj.weight", {c.intermediate_size, h}, true);
    expect(p + "mlp.down_proj.weight", {h, c.intermediate_size}, true);
  }
}

const TensorView *ModelWeights::find(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return &it->second;
  if (name == "lm_head.weight" && config_.tie_word_embeddings)
    return find("model.embed_tokens.weight");
  return nullptr;
}

const TensorView &ModelWeights::get(std::string_view name) const {
  if (const TensorView *t = find(name)) return *t;
  if (auto u = unsupported_.find(name); u != unsupported_.end())
    throw Error(ErrorCode::kUnsupported, u->second);
  throw Error(ErrorCode::kNotFound, path_.string() + ": no tensor named " + std::string(name));
}

std::vector<std::string> ModelWeights::names() const {
  std::vector<std::string> out;
  for (const auto &[k, v] : tensors_) out.push_back(k);
  return out;
}

std::string ModelWeights::linear_dtypes() const {
  std::set<std::string_view> kinds;
  for (const auto &[k, v] : tensors_)
    if (v.shape.size() >= 2 && k.find("embed_tokens") == std::string::npos &&
        !k.ends_with("_scale_inv") && !k.ends_with("_scale"))  // FP8 scales ride along
      kinds.insert(dtype_name(v.dtype));
  std::string out;
  for (const std::string_view k : kinds) {
    if (!out.empty()) out += '+';
    out += k;
  }
  return out;
}

std::size_t ModelWeights::total_bytes() const {
  std::size_t n = 0;
  for (const auto &[k, v] : tensors_) n += v.nbytes;
  return n;
}

}  // namespace keel
