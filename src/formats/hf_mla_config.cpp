#include "formats/hf_mla_config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "formats/config_fields.h"

namespace keel {

namespace {

using nlohmann::json;

using config_fields::fail;
using config_fields::opt_int;
using config_fields::req_int;

// "full" / "shared" per layer, from indexer_types, else index_topk_pattern ("FSS..." or a
// list), else transformers' schedule from index_topk_freq and index_skip_topk_offset.
std::vector<bool> parse_index_shared(const json &j, std::int64_t L, const std::string &origin) {
  std::vector<bool> shared;
  auto entry = [&](const std::string &field, const std::string &v) {
    if (v == "full" || v == "F")
      shared.push_back(false);
    else if (v == "shared" || v == "S")
      shared.push_back(true);
    else
      fail(origin, field + ": \"" + v + "\" is not \"full\" or \"shared\"");
  };
  auto list = [&](const char *field) {
    const json &a = j[field];
    if (a.is_string()) {
      for (char ch : a.get<std::string>()) entry(field, std::string(1, ch));
    } else if (a.is_array()) {
      for (const auto &v : a) entry(field, v.is_string() ? v.get<std::string>() : v.dump());
    } else {
      fail(origin, std::string(field) + ": expected a list");
    }
    if (static_cast<std::int64_t>(shared.size()) != L)
      fail(origin, std::string(field) + ": " + std::to_string(shared.size()) +
                       " entries for num_hidden_layers " + std::to_string(L));
  };
  if (j.contains("indexer_types") && !j["indexer_types"].is_null()) {
    list("indexer_types");
  } else if (j.contains("index_topk_pattern") && !j["index_topk_pattern"].is_null()) {
    list("index_topk_pattern");
  } else {
    const std::int64_t freq =
        std::max<std::int64_t>(opt_int(j, "index_topk_freq", origin).value_or(1), 1);
    const std::int64_t offset = opt_int(j, "index_skip_topk_offset", origin).value_or(2);
    for (std::int64_t i = 0; i < L; ++i)
      shared.push_back(std::max<std::int64_t>(i - offset + 1, 0) % freq != 0);
  }
  return shared;
}

}  // namespace

void parse_hf_mla(const json &j, ModelConfig &c, const std::string &origin) {
  MlaConfig m;
  m.q_lora_rank = opt_int(j, "q_lora_rank", origin).value_or(0);
  m.kv_lora_rank = req_int(j, "kv_lora_rank", origin);
  m.qk_nope_head_dim = req_int(j, "qk_nope_head_dim", origin);
  m.qk_rope_head_dim = req_int(j, "qk_rope_head_dim", origin);
  m.v_head_dim = req_int(j, "v_head_dim", origin);
  if (m.q_lora_rank < 0) fail(origin, "q_lora_rank: must be positive (or null)");
  c.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
  c.num_kv_heads = c.num_heads;  // every head reads the one latent
  c.kv_layout = KvLayout::kLatent;
  c.partial_rotary_factor = 1.0;
  // DeepSeek-V3 rotates adjacent pairs when rope_interleave (true by default) and halves
  // otherwise; transformers' GLM-5 attention and its DSA indexer always rotate pairs.
  bool interleave = true;
  if (auto it = j.find("rope_interleave"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) fail(origin, "rope_interleave: expected a bool");
    interleave = it->get<bool>();
  }
  c.rope_style =
      c.arch == Arch::kGlmMoeDsa || interleave ? RopeStyle::kInterleaved : RopeStyle::kNeox;
  m.softmax_scale = 1.0 / std::sqrt(static_cast<double>(std::max<std::int64_t>(c.head_dim, 1)));
  if (c.rope_scaling.type != RopeScaling::Type::kNone &&
      c.rope_scaling.mscale_all_dim.value_or(0) != 0) {
    const double ms = yarn_mscale(c.rope_scaling.factor, *c.rope_scaling.mscale_all_dim);
    m.softmax_scale *= ms * ms;
  }
  if (c.arch == Arch::kGlmMoeDsa) {
    m.index_topk = req_int(j, "index_topk", origin);
    m.index_n_heads = req_int(j, "index_n_heads", origin);
    m.index_head_dim = req_int(j, "index_head_dim", origin);
    m.index_shared = parse_index_shared(j, c.num_layers, origin);
    if (m.index_topk <= 0) fail(origin, "index_topk: must be positive");
    // mlp_layer_types ("dense" / "sparse") overrides first_k_dense_replace.
    if (auto it = j.find("mlp_layer_types"); it != j.end() && !it->is_null() && c.moe) {
      if (!it->is_array() || static_cast<std::int64_t>(it->size()) != c.num_layers)
        fail(origin, "mlp_layer_types: expected one entry per layer");
      for (std::size_t l = 0; l < it->size(); ++l) {
        const json &v = (*it)[l];
        const std::string t = v.is_string() ? v.get<std::string>() : v.dump();
        if (t != "dense" && t != "sparse")
          fail(origin, "mlp_layer_types: \"" + t + "\" is not \"dense\" or \"sparse\"");
        c.moe->sparse_layers[l] = t == "sparse";
      }
    }
  }
  c.mla = m;
}

void validate_mla(const ModelConfig &c, const std::string &origin) {
  if (!c.mla) {
    if (c.kv_layout == KvLayout::kLatent) fail(origin, "a latent KV layout needs the MLA fields");
    return;
  }
  const MlaConfig &m = *c.mla;
  auto range = [&](std::int64_t v, const char *name, std::int64_t lo) {
    if (v < lo || v > (std::int64_t{1} << 16))
      fail(origin, std::string(name) + ": " + std::to_string(v) + " is out of range");
  };
  if (m.q_lora_rank != 0) range(m.q_lora_rank, "q_lora_rank", 1);
  range(m.kv_lora_rank, "kv_lora_rank", 1);
  range(m.qk_nope_head_dim, "qk_nope_head_dim", 1);
  range(m.qk_rope_head_dim, "qk_rope_head_dim", 2);
  range(m.v_head_dim, "v_head_dim", 1);
  if (m.qk_rope_head_dim % 2 != 0) fail(origin, "qk_rope_head_dim: must be even");
  if (c.head_dim != m.qk_head_dim())
    fail(origin, "head_dim: must be qk_nope_head_dim + qk_rope_head_dim for MLA");
  if (c.num_kv_heads != c.num_heads)
    fail(origin, "num_key_value_heads: MLA reads one latent for every head");
  if (!c.moe) fail(origin, "n_routed_experts: MLA models here are mixtures of experts");
  if (m.dsa()) {
    range(m.index_n_heads, "index_n_heads", 1);
    range(m.index_head_dim, "index_head_dim", 1);
    if (m.index_head_dim < m.qk_rope_head_dim)
      fail(origin, "index_head_dim: smaller than qk_rope_head_dim");
    if (m.q_lora_rank == 0) fail(origin, "q_lora_rank: the DSA indexer reads the q latent");
    if (static_cast<std::int64_t>(m.index_shared.size()) != c.num_layers)
      fail(origin, "indexer_types: one entry per layer expected");
    if (m.shared_selection(0))
      fail(origin, "indexer_types: the first layer cannot be \"shared\" (no selection to reuse)");
  }
}

}  // namespace keel
