// ModelConfig from HF config.json (+ generation_config.json) or from GGUF metadata.
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "formats/config_fields.h"
#include "formats/gguf.h"
#include "formats/hf_mla_config.h"
#include "formats/hf_moe_config.h"
#include "formats/model_config.h"

namespace keel {

namespace {

using nlohmann::json;

using config_fields::fail;
using config_fields::opt_bool;
using config_fields::opt_int;
using config_fields::opt_num;
using config_fields::req_int;

// eos_token_id / bos_token_id: an integer, a list of integers, or null.
std::vector<TokenId> token_ids(const json &j, const char *key, const std::string &origin) {
  std::vector<TokenId> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  auto one = [&](const json &v) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
        v.get<std::int64_t>() > std::numeric_limits<TokenId>::max())
      fail(origin, std::string(key) + ": expected token ids");
    out.push_back(static_cast<TokenId>(v.get<std::int64_t>()));
  };
  if (it->is_array()) {
    for (const auto &v : *it) one(v);
  } else {
    one(*it);
  }
  return out;
}

void merge_ids(std::vector<TokenId> &into, const std::vector<TokenId> &more) {
  for (TokenId t : more) {
    bool seen = false;
    for (TokenId u : into) seen = seen || u == t;
    if (!seen) into.push_back(t);
  }
}

RopeScaling parse_rope_scaling(const json &rs, const std::string &origin) {
  RopeScaling r;
  if (!rs.is_object()) fail(origin, "rope_scaling: expected an object");
  // transformers 4.x writes "rope_type"; older configs wrote "type".
  std::string type;
  if (rs.contains("rope_type") && rs["rope_type"].is_string())
    type = rs["rope_type"].get<std::string>();
  else if (rs.contains("type") && rs["type"].is_string())
    type = rs["type"].get<std::string>();
  else
    fail(origin, "rope_scaling: missing rope_type");
  const std::string where = origin + ": rope_scaling";
  if (type == "default") return r;
  if (type == "linear") {
    r.type = RopeScaling::Type::kLinear;
  } else if (type == "llama3") {
    r.type = RopeScaling::Type::kLlama3;
  } else if (type == "yarn") {
    r.type = RopeScaling::Type::kYarn;
  } else {
    throw Error(ErrorCode::kUnsupported, where + ": rope type \"" + type + "\" is not supported");
  }
  auto factor = opt_num(rs, "factor", where);
  if (!factor || *factor <= 0) fail(where, "factor: missing or not positive");
  r.factor = *factor;
  if (auto v = opt_num(rs, "low_freq_factor", where)) r.low_freq_factor = *v;
  if (auto v = opt_num(rs, "high_freq_factor", where)) r.high_freq_factor = *v;
  if (auto v = opt_int(rs, "original_max_position_embeddings", where)) r.original_max_position = *v;
  if (auto v = opt_num(rs, "beta_fast", where)) r.beta_fast = *v;
  if (auto v = opt_num(rs, "beta_slow", where)) r.beta_slow = *v;
  if (auto v = opt_num(rs, "attention_factor", where)) r.attention_factor = *v;
  if (auto v = opt_bool(rs, "truncate", where)) r.truncate = *v;
  if (auto v = opt_num(rs, "mscale", where)) r.mscale = *v;
  if (auto v = opt_num(rs, "mscale_all_dim", where)) r.mscale_all_dim = *v;
  if (r.type == RopeScaling::Type::kYarn && !r.attention_factor && r.mscale.value_or(0) != 0 &&
      r.mscale_all_dim.value_or(0) != 0)
    r.attention_factor =
        yarn_mscale(r.factor, *r.mscale) / yarn_mscale(r.factor, *r.mscale_all_dim);
  if (r.type == RopeScaling::Type::kLlama3 &&
      (r.high_freq_factor <= r.low_freq_factor || r.original_max_position <= 0))
    fail(where, "llama3 needs high_freq_factor > low_freq_factor and a positive original length");
  return r;
}

std::string read_text(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(ErrorCode::kNotFound, p.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

const char *arch_name(Arch arch) {
  switch (arch) {
    case Arch::kLlama:
      return "llama";
    case Arch::kMistral:
      return "mistral";
    case Arch::kQwen2:
      return "qwen2";
    case Arch::kQwen3:
      return "qwen3";
    case Arch::kQwen3Moe:
      return "qwen3_moe";
    case Arch::kMixtral:
      return "mixtral";
    case Arch::kGlm4Moe:
      return "glm4_moe";
    case Arch::kGptOss:
      return "gpt_oss";
    case Arch::kDeepseekV3:
      return "deepseek_v3";
    case Arch::kGlmMoeDsa:
      return "glm_moe_dsa";
  }
  return "?";
}

void validate_config(const ModelConfig &c, const std::string &origin) {
  auto positive = [&](std::int64_t v, const char *name, std::int64_t max) {
    if (v <= 0 || v > max)
      fail(origin, std::string(name) + ": " + std::to_string(v) + " is out of range");
  };
  constexpr std::int64_t kBig = std::int64_t{1} << 24;
  positive(c.vocab_size, "vocab_size", std::int64_t{1} << 26);
  positive(c.hidden_size, "hidden_size", kBig);
  positive(c.intermediate_size, "intermediate_size", kBig);
  positive(c.num_layers, "num_hidden_layers", 1 << 16);
  positive(c.num_heads, "num_attention_heads", 1 << 16);
  positive(c.num_kv_heads, "num_key_value_heads", 1 << 16);
  positive(c.head_dim, "head_dim", 1 << 16);
  positive(c.max_position_embeddings, "max_position_embeddings", std::int64_t{1} << 40);
  if (c.num_heads % c.num_kv_heads != 0)
    fail(origin, "num_attention_heads (" + std::to_string(c.num_heads) +
                     ") is not a multiple of num_key_value_heads (" +
                     std::to_string(c.num_kv_heads) + ")");
  if (c.head_dim % 2 != 0) fail(origin, "head_dim must be even for rotary embeddings");
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) fail(origin, "rms_norm_eps out of range");
  if (!(c.rope_theta > 0)) fail(origin, "rope_theta must be positive");
  if (c.sliding_window && *c.sliding_window <= 0) fail(origin, "sliding_window must be positive");
  if (!c.sliding_layers.empty() &&
      static_cast<std::int64_t>(c.sliding_layers.size()) != c.num_layers)
    fail(origin, "layer_types: " + std::to_string(c.sliding_layers.size()) +
                     " entries for num_hidden_layers " + std::to_string(c.num_layers));
  if (!c.sliding_window)
    for (bool sliding : c.sliding_layers)
      if (sliding) fail(origin, "layer_types: sliding_attention needs a sliding_window");
  {
    const double rot = c.head_dim * c.partial_rotary_factor;
    if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1) || rot != std::floor(rot) ||
        static_cast<std::int64_t>(rot) % 2 != 0)
      fail(origin, "partial_rotary_factor: " + std::to_string(c.partial_rotary_factor) +
                       " does not give an even part of head_dim");
  }
  for (TokenId t : c.eos_token_ids)
    if (t >= c.vocab_size) fail(origin, "eos_token_id " + std::to_string(t) + " >= vocab_size");
  if (c.bos_token_id && *c.bos_token_id >= c.vocab_size)
    fail(origin, "bos_token_id " + std::to_string(*c.bos_token_id) + " >= vocab_size");
  validate_moe(c, origin);
  validate_mla(c, origin);
}

ModelConfig parse_hf_config(const std::string &text, const std::string &origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception &e) {
    fail(origin, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(origin, "not a JSON object");
  ModelConfig c;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    fail(origin, "model_type: missing");
  c.arch_name = j["model_type"].get<std::string>();
  if (c.arch_name == "llama") {
    c.arch = Arch::kLlama;
  } else if (c.arch_name == "mistral") {
    c.arch = Arch::kMistral;
  } else if (c.arch_name == "qwen2") {
    c.arch = Arch::kQwen2;
  } else if (c.arch_name == "qwen3") {
    c.arch = Arch::kQwen3;
  } else if (c.arch_name == "qwen3_moe") {
    c.arch = Arch::kQwen3Moe;
  } else if (c.arch_name == "mixtral") {
    c.arch = Arch::kMixtral;
  } else if (c.arch_name == "glm4_moe") {
    c.arch = Arch::kGlm4Moe;
  } else if (c.arch_name == "gpt_oss") {
    c.arch = Arch::kGptOss;
  } else if (c.arch_name == "deepseek_v3" || c.arch_name == "kimi_k2") {
    c.arch = Arch::kDeepseekV3;  // Kimi K2 is DeepseekV3ForCausalLM under its own name
  } else if (c.arch_name == "glm_moe_dsa") {
    c.arch = Arch::kGlmMoeDsa;
  } else {
    throw Error(ErrorCode::kUnsupported,
                origin + ": model_type \"" + c.arch_name + "\" is not supported");
  }
  c.vocab_size = req_int(j, "vocab_size", origin);
  c.hidden_size = req_int(j, "hidden_size", origin);
  c.intermediate_size = req_int(j, "intermediate_size", origin);
  c.num_layers = req_int(j, "num_hidden_layers", origin);
  c.num_heads = req_int(j, "num_attention_heads", origin);
  c.num_kv_heads = opt_int(j, "num_key_value_heads", origin).value_or(c.num_heads);
  const bool mla = c.arch == Arch::kDeepseekV3 || c.arch == Arch::kGlmMoeDsa;
  if (mla) {
    // head_dim is set from the MLA fields below (the released configs' head_dim, where
    // present, names the rope part).
  } else if (auto hd = opt_int(j, "head_dim", origin)) {
    c.head_dim = *hd;
  } else {
    if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0)
      fail(origin, "hidden_size is not a multiple of num_attention_heads (and no head_dim)");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (auto v = opt_int(j, "max_position_embeddings", origin)) c.max_position_embeddings = *v;
  if (auto v = opt_num(j, "rms_norm_eps", origin)) c.rms_norm_eps = *v;

  // transformers 5 nests rope_theta (and the scaling) in rope_parameters.
  const json *rope_params = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
    rope_params = &j["rope_parameters"];
  if (auto v = opt_num(j, "rope_theta", origin)) {
    c.rope_theta = *v;
  } else if (rope_params) {
    if (auto w = opt_num(*rope_params, "rope_theta", origin + ": rope_parameters"))
      c.rope_theta = *w;
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    c.rope_scaling = parse_rope_scaling(j["rope_scaling"], origin);
  } else if (rope_params && (rope_params->contains("rope_type") || rope_params->contains("type"))) {
    c.rope_scaling = parse_rope_scaling(*rope_params, origin);
  }

  const bool attn_bias = opt_bool(j, "attention_bias", origin).value_or(false);
  switch (c.arch) {
    case Arch::kQwen2:
      c.attention_bias = true;  // Qwen2 always has q/k/v biases (and none on o_proj)
      break;
    case Arch::kQwen3:
    case Arch::kQwen3Moe:
      c.qk_norm = true;
      c.attention_bias = attn_bias;
      c.attention_out_bias = attn_bias;
      break;
    case Arch::kLlama:
    case Arch::kMistral:
    case Arch::kMixtral:
      c.attention_bias = attn_bias;
      c.attention_out_bias = attn_bias;
      break;
    case Arch::kGlm4Moe:
      // q/k/v biases with attention_bias, never one on o_proj; q/k norm when asked.
      c.attention_bias = attn_bias;
      c.qk_norm = opt_bool(j, "use_qk_norm", origin).value_or(false);
      break;
    case Arch::kDeepseekV3:
    case Arch::kGlmMoeDsa:
      // Biases on q_a_proj, kv_a_proj_with_mqa and o_proj with attention_bias
      // (hf_mla_config.cpp).
      c.attention_bias = attn_bias;
      c.attention_out_bias = attn_bias;
      break;
    case Arch::kGptOss:
      // q/k/v and o_proj biases with attention_bias (true in the releases); a sink logit
      // per head always.
      c.attention_bias = attn_bias;
      c.attention_out_bias = attn_bias;
      c.attention_sinks = true;
      break;
  }
  // GLM-4.5 rotates only part of each head (top level, or in transformers 5's
  // rope_parameters).
  if (auto v = opt_num(j, "partial_rotary_factor", origin)) {
    c.partial_rotary_factor = *v;
  } else if (rope_params) {
    if (auto w = opt_num(*rope_params, "partial_rotary_factor", origin + ": rope_parameters"))
      c.partial_rotary_factor = *w;
  }
  if (c.arch != Arch::kGptOss && opt_bool(j, "mlp_bias", origin).value_or(false))
    throw Error(ErrorCode::kUnsupported, origin + ": mlp_bias is not supported");
  c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", origin).value_or(false);
  parse_hf_moe(j, c, origin);
  if (mla) parse_hf_mla(j, c, origin);
  c.fp8 = parse_fp8_config(j, origin);

  // Qwen configs carry a sliding_window that is off unless use_sliding_window is set.
  const auto sw = opt_int(j, "sliding_window", origin);
  const auto use_sw = opt_bool(j, "use_sliding_window", origin);
  if (sw && use_sw.value_or(true)) c.sliding_window = *sw;
  // layer_types says which layers slide (gpt-oss alternates sliding and full layers).
  if (auto it = j.find("layer_types"); it != j.end() && !it->is_null() && !mla) {
    if (!it->is_array()) fail(origin, "layer_types: expected a list");
    for (const auto &t : *it) {
      const std::string type = t.is_string() ? t.get<std::string>() : t.dump();
      if (type == "sliding_attention") {
        c.sliding_layers.push_back(true);
      } else if (type == "full_attention") {
        c.sliding_layers.push_back(false);
      } else {
        throw Error(ErrorCode::kUnsupported,
                    origin + ": layer_types: \"" + type + "\" is not supported");
      }
    }
  } else if (c.arch == Arch::kGptOss && c.sliding_window) {
    // transformers' GptOssConfig without layer_types: even layers slide, odd ones attend fully.
    for (std::int64_t l = 0; l < c.num_layers; ++l) c.sliding_layers.push_back(l % 2 == 0);
  }

  const auto bos = token_ids(j, "bos_token_id", origin);
  if (!bos.empty()) c.bos_token_id = bos.front();
  c.eos_token_ids = token_ids(j, "eos_token_id", origin);
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string())
    c.torch_dtype = j["torch_dtype"].get<std::string>();
  else if (j.contains("dtype") && j["dtype"].is_string())
    c.torch_dtype = j["dtype"].get<std::string>();
  validate_config(c, origin);
  return c;
}

ModelConfig load_hf_config(const std::filesystem::path &model_dir) {
  const auto config_path = model_dir / "config.json";
  ModelConfig c = parse_hf_config(read_text(config_path), config_path.string());
  const auto gen_path = model_dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    const std::string origin = gen_path.string();
    json g;
    try {
      g = json::parse(read_text(gen_path));
    } catch (const json::exception &e) {
      fail(origin, std::string("not valid JSON: ") + e.what());
    }
    if (!g.is_object()) fail(origin, "not a JSON object");
    merge_ids(c.eos_token_ids, token_ids(g, "eos_token_id", origin));
    if (!c.bos_token_id) {
      const auto bos = token_ids(g, "bos_token_id", origin);
      if (!bos.empty()) c.bos_token_id = bos.front();
    }
  }
  validate_config(c, config_path.string());
  return c;
}

namespace {

// llama.cpp's glm4moe: block_count counts the MTP layers (nextn_predict_layers) after
// the decoder layers; rope.dimension_count is the rotated part of a head; experts are
// stacked per layer, the shared one is ffn_*_shexp, the correction bias exp_probs_b; a
// layer with a router is sparse.
MoeConfig glm4moe_from_gguf(const GgufFile &g, ModelConfig &c) {
  const std::string &origin = g.path();
  const std::string a = c.arch_name + ".";
  MoeConfig m;
  m.scoring = MoeConfig::Scoring::kSigmoid;
  if (auto f = g.get_opt_i64(a + "expert_gating_func"); f && *f != 2)
    throw Error(ErrorCode::kUnsupported, origin + ": " + a + "expert_gating_func " +
                                             std::to_string(*f) + " is not supported (2, sigmoid)");
  m.num_experts = g.get_i64(a + "expert_count");
  m.top_k = g.get_i64(a + "expert_used_count");
  m.expert_intermediate = g.get_i64(a + "expert_feed_forward_length");
  m.shared_intermediate =
      g.get_opt_i64(a + "expert_shared_count").value_or(1) * m.expert_intermediate;
  m.routed_scaling_factor = g.get_opt_f64(a + "expert_weights_scale").value_or(1.0);
  m.norm_topk_prob = g.get_opt_bool(a + "expert_weights_norm").value_or(false);
  // Not written by llama.cpp's GLM converter (the released models have one group); read
  // when present, as other architectures' GGUF files name them.
  m.n_group = g.get_opt_i64(a + "expert_group_count").value_or(1);
  m.topk_group = g.get_opt_i64(a + "expert_group_used_count").value_or(m.n_group);
  m.nextn_predict_layers = g.get_opt_i64(a + "nextn_predict_layers").value_or(0);
  if (m.nextn_predict_layers < 0 || m.nextn_predict_layers >= c.num_layers)
    fail(origin, a + "nextn_predict_layers: " + std::to_string(m.nextn_predict_layers) +
                     " is not less than block_count");
  c.num_layers -= m.nextn_predict_layers;
  if (auto rot = g.get_opt_i64(a + "rope.dimension_count"); rot && c.head_dim > 0)
    c.partial_rotary_factor = static_cast<double>(*rot) / static_cast<double>(c.head_dim);
  for (std::int64_t l = 0; l < c.num_layers; ++l)
    m.sparse_layers.push_back(g.find_tensor("blk." + std::to_string(l) + ".ffn_gate_inp.weight") !=
                              nullptr);
  return m;
}

// llama.cpp's deepseek2: MLA's ranks and head sizes. Files converted for llama.cpp's MLA
// path say head_count_kv 1 and key/value_length of the latent (kv_lora + rope, kv_lora),
// with the per-head sizes in key_length_mla / value_length_mla; older ones give the per-head
// sizes in key_length / value_length. Rotary pairs are adjacent (llama.cpp's NORM rope, as
// HF's rope_interleave). yarn_log_multiplier is 0.1 mscale_all_dim.
void mla_from_gguf(const GgufFile &g, ModelConfig &c) {
  const std::string &origin = g.path();
  const std::string a = c.arch_name + ".";
  MlaConfig m;
  m.q_lora_rank = g.get_opt_i64(a + "attention.q_lora_rank").value_or(0);
  m.kv_lora_rank = g.get_i64(a + "attention.kv_lora_rank");
  m.qk_rope_head_dim = g.get_i64(a + "rope.dimension_count");
  const std::int64_t qk =
      g.get_opt_i64(a + "attention.key_length_mla").value_or(g.get_i64(a + "attention.key_length"));
  m.v_head_dim = g.get_opt_i64(a + "attention.value_length_mla")
                     .value_or(g.get_i64(a + "attention.value_length"));
  m.qk_nope_head_dim = qk - m.qk_rope_head_dim;
  if (m.qk_nope_head_dim <= 0)
    fail(origin, a + "attention.key_length: not more than rope.dimension_count");
  c.head_dim = qk;
  c.num_kv_heads = c.num_heads;
  c.partial_rotary_factor = 1.0;
  c.rope_style = RopeStyle::kInterleaved;
  c.kv_layout = KvLayout::kLatent;
  m.softmax_scale = 1.0 / std::sqrt(static_cast<double>(qk));
  if (auto mul = g.get_opt_f64(a + "rope.scaling.yarn_log_multiplier");
      mul && *mul != 0 && c.rope_scaling.type == RopeScaling::Type::kYarn) {
    c.rope_scaling.mscale_all_dim = *mul / 0.1;
    c.rope_scaling.mscale = c.rope_scaling.mscale_all_dim;  // the releases set both alike
    c.rope_scaling.attention_factor = 1.0;
    const double ms = yarn_mscale(c.rope_scaling.factor, *c.rope_scaling.mscale_all_dim);
    m.softmax_scale *= ms * ms;
  }
  c.mla = m;
}

// llama.cpp's gpt-oss: experts stacked with their biases (ffn_{gate,up,down}_exps.bias, gate
// and up already apart), a biased router softmaxed over its top k, the clamped SwiGLU with
// llama.cpp's fixed limit and alpha, sinks in attn_sinks, and a window on every layer but
// the last of each attention.sliding_window_pattern (2 when absent: even layers slide).
// YaRN keeps the model's untruncated correction range (truncate: false in config.json).
MoeConfig gpt_oss_from_gguf(const GgufFile &g, ModelConfig &c) {
  const std::string &origin = g.path();
  const std::string a = c.arch_name + ".";
  MoeConfig m;
  m.scoring = MoeConfig::Scoring::kTopkSoftmax;
  m.router_bias = true;
  m.expert_bias = true;
  m.swiglu_limit = 7.0;
  m.num_experts = g.get_i64(a + "expert_count");
  m.top_k = g.get_i64(a + "expert_used_count");
  m.expert_intermediate = g.get_i64(a + "expert_feed_forward_length");
  m.sparse_layers.assign(static_cast<std::size_t>(std::max<std::int64_t>(c.num_layers, 0)), true);
  c.attention_sinks = true;
  c.rope_scaling.truncate = false;
  if (c.sliding_window) {
    const std::int64_t period = g.get_opt_i64(a + "attention.sliding_window_pattern").value_or(2);
    if (period <= 0)
      fail(origin,
           a + "attention.sliding_window_pattern: " + std::to_string(period) + " is not positive");
    for (std::int64_t l = 0; l < c.num_layers; ++l)
      c.sliding_layers.push_back(l % period < period - 1);
  }
  return m;
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile &g) {
  const std::string &origin = g.path();
  ModelConfig c;
  c.arch_name = std::string(g.get_string("general.architecture"));
  if (c.arch_name == "llama") {
    c.arch = Arch::kLlama;
    // llama.cpp's converter permutes llama q/k rows so rotary pairs are adjacent.
    c.rope_style = RopeStyle::kInterleaved;
  } else if (c.arch_name == "qwen2") {
    c.arch = Arch::kQwen2;
  } else if (c.arch_name == "qwen3") {
    c.arch = Arch::kQwen3;
  } else if (c.arch_name == "qwen3moe") {
    c.arch = Arch::kQwen3Moe;
  } else if (c.arch_name == "glm4moe") {
    c.arch = Arch::kGlm4Moe;
  } else if (c.arch_name == "gpt-oss") {
    c.arch = Arch::kGptOss;
  } else if (c.arch_name == "deepseek2") {
    c.arch = Arch::kDeepseekV3;
  } else {
    throw Error(ErrorCode::kUnsupported,
                origin + ": general.architecture \"" + c.arch_name + "\" is not supported");
  }
  const std::string a = c.arch_name + ".";
  c.hidden_size = g.get_i64(a + "embedding_length");
  // gpt-oss has no dense MLP: its experts' width stands in when feed_forward_length is absent.
  c.intermediate_size = c.arch == Arch::kGptOss && !g.get_opt_i64(a + "feed_forward_length")
                            ? g.get_i64(a + "expert_feed_forward_length")
                            : g.get_i64(a + "feed_forward_length");
  c.num_layers = g.get_i64(a + "block_count");
  c.num_heads = g.get_i64(a + "attention.head_count");
  c.num_kv_heads = g.get_opt_i64(a + "attention.head_count_kv").value_or(c.num_heads);
  if (auto hd = g.get_opt_i64(a + "attention.key_length")) {
    c.head_dim = *hd;
  } else {
    if (c.num_heads <= 0 || c.hidden_size % c.num_heads != 0)
      fail(origin, a + "embedding_length is not a multiple of the head count");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (auto v = g.get_opt_i64(a + "context_length")) c.max_position_embeddings = *v;
  if (auto v = g.get_opt_f64(a + "attention.layer_norm_rms_epsilon")) c.rms_norm_eps = *v;
  if (auto v = g.get_opt_f64(a + "rope.freq_base")) c.rope_theta = *v;
  if (auto v = g.get_opt_i64(a + "attention.sliding_window")) c.sliding_window = *v;

  if (auto type = g.get_opt_string(a + "rope.scaling.type")) {
    auto &r = c.rope_scaling;
    if (*type == "linear") {
      r.type = RopeScaling::Type::kLinear;
    } else if (*type == "yarn") {
      r.type = RopeScaling::Type::kYarn;
    } else if (*type == "llama3") {  // keel's own key; llama.cpp uses rope_freqs instead
      r.type = RopeScaling::Type::kLlama3;
    } else if (*type != "none") {
      throw Error(ErrorCode::kUnsupported,
                  origin + ": rope scaling \"" + std::string(*type) + "\" is not supported");
    }
    if (auto v = g.get_opt_f64(a + "rope.scaling.factor")) r.factor = *v;
    if (auto v = g.get_opt_i64(a + "rope.scaling.original_context_length"))
      r.original_max_position = *v;
    if (auto v = g.get_opt_f64(a + "rope.scaling.yarn_beta_fast")) r.beta_fast = *v;
    if (auto v = g.get_opt_f64(a + "rope.scaling.yarn_beta_slow")) r.beta_slow = *v;
    if (auto v = g.get_opt_f64(a + "rope.scaling.low_freq_factor")) r.low_freq_factor = *v;
    if (auto v = g.get_opt_f64(a + "rope.scaling.high_freq_factor")) r.high_freq_factor = *v;
    if (r.type != RopeScaling::Type::kNone && !(r.factor > 0))
      fail(origin, a + "rope.scaling.factor must be positive");
  }
  if (const GgufTensorInfo *rf = g.find_tensor("rope_freqs.weight")) {
    if (rf->dtype != DType::kF32 || rf->nbytes != static_cast<std::size_t>(c.head_dim / 2) * 4)
      fail(origin, "rope_freqs.weight: expected f32 [head_dim / 2]");
    c.rope_freq_factors.resize(c.head_dim / 2);
    std::memcpy(c.rope_freq_factors.data(), rf->data, rf->nbytes);
  }

  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  c.attention_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.attention_out_bias = g.find_tensor("blk.0.attn_output.bias") != nullptr;
  c.qk_norm = g.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
  if (c.arch == Arch::kQwen3Moe) {
    // llama.cpp's qwen3moe: experts stacked per layer (blk.N.ffn_gate_exps.weight, ...);
    // a layer with a router is sparse.
    MoeConfig m;
    m.num_experts = g.get_i64(a + "expert_count");
    m.top_k = g.get_i64(a + "expert_used_count");
    m.expert_intermediate = g.get_i64(a + "expert_feed_forward_length");
    m.norm_topk_prob = true;  // llama.cpp's qwen3moe graph always renormalizes
    for (std::int64_t l = 0; l < c.num_layers; ++l)
      m.sparse_layers.push_back(
          g.find_tensor("blk." + std::to_string(l) + ".ffn_gate_inp.weight") != nullptr);
    c.moe = m;
  } else if (c.arch == Arch::kGlm4Moe) {
    c.moe = glm4moe_from_gguf(g, c);
  } else if (c.arch == Arch::kGptOss) {
    c.moe = gpt_oss_from_gguf(g, c);
  } else if (c.arch == Arch::kDeepseekV3) {
    c.moe = glm4moe_from_gguf(g, c);  // the same keys: sigmoid groups, shared experts
    mla_from_gguf(g, c);
  }

  if (auto v = g.get_opt_i64(a + "vocab_size")) {
    c.vocab_size = *v;
  } else if (const GgufTensorInfo *emb = g.find_tensor("token_embd.weight")) {
    c.vocab_size = emb->shape.front();
  } else if (const GgufValue *toks = g.get_opt_array("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<std::int64_t>(toks->size());
  } else {
    fail(origin, "vocabulary size unknown (no vocab_size, token_embd.weight or tokens)");
  }
  auto token = [&](const char *key) -> std::optional<TokenId> {
    auto v = g.get_opt_i64(key);
    if (!v) return std::nullopt;
    if (*v < 0 || *v > std::numeric_limits<TokenId>::max())
      fail(origin, std::string(key) + ": out of range");
    return static_cast<TokenId>(*v);
  };
  c.bos_token_id = token("tokenizer.ggml.bos_token_id");
  for (const char *key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"})
    if (auto t = token(key)) merge_ids(c.eos_token_ids, {*t});
  validate_config(c, origin);
  return c;
}

}  // namespace keel
