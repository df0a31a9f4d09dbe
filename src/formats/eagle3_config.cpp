#include "formats/eagle3_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "formats/config_fields.h"

namespace keel {

namespace {
using config_fields::fail;
using config_fields::opt_bool;
using config_fields::opt_int;
using nlohmann::json;
}  // namespace

Eagle3Config parse_eagle3_config(const std::string &text, const std::string &origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception &e) {
    fail(origin, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) fail(origin, "not a JSON object");
  if (j.contains("architectures")) {
    bool eagle3 = false;
    if (j["architectures"].is_array())
      for (const auto &a : j["architectures"])
        if (a.is_string() && (a.get<std::string>().find("Eagle3") != std::string::npos ||
                              a.get<std::string>().find("EAGLE3") != std::string::npos))
          eagle3 = true;
    // yuhuili's EAGLE3-LLaMA3.1-Instruct-8B says LlamaForCausalLM: its draft_vocab_size
    // marks it as a head.
    if (!eagle3 && !j.contains("draft_vocab_size"))
      fail(origin, "architectures: " + j["architectures"].dump() +
                       " is not an EAGLE-3 head (expected LlamaForCausalLMEagle3, or a "
                       "draft_vocab_size)");
  }
  // The layer is a Llama decoder layer; its checkpoints name the model_type "llama" and one
  // hidden layer, which older ones leave out. vLLM's speculators format nests the layer's
  // fields in transformer_layer_config (the head's own fields stay at the top).
  json layer = j;
  if (j.contains("transformer_layer_config") && j["transformer_layer_config"].is_object()) {
    layer = j["transformer_layer_config"];
    for (const auto &[k, v] : j.items())
      if (!layer.contains(k) && k != "transformer_layer_config") layer[k] = v;
  }
  if (!layer.contains("model_type")) layer["model_type"] = "llama";
  if (!layer.contains("num_hidden_layers")) layer["num_hidden_layers"] = 1;
  Eagle3Config c;
  c.layer = parse_hf_config(layer.dump(), origin);
  if (c.layer.arch != Arch::kLlama)
    fail(origin, "model_type: an EAGLE-3 head is a llama layer, not " + c.layer.arch_name);
  if (c.layer.attention_bias || c.layer.qk_norm)
    fail(origin, "attention_bias: EAGLE-3 heads with attention biases are not supported");
  c.draft_vocab_size = opt_int(j, "draft_vocab_size", origin).value_or(c.layer.vocab_size);
  if (c.draft_vocab_size <= 0 || c.draft_vocab_size > c.layer.vocab_size)
    fail(origin, "draft_vocab_size " + std::to_string(c.draft_vocab_size) +
                     " is not in [1, vocab_size " + std::to_string(c.layer.vocab_size) + "]");
  c.target_hidden_size = opt_int(j, "target_hidden_size", origin).value_or(c.layer.hidden_size);
  if (c.target_hidden_size <= 0) fail(origin, "target_hidden_size: not positive");
  c.norm_before_residual = opt_bool(j, "norm_before_residual", origin).value_or(false);
  // Two conventions for the aux layers: SGLang / SpecForge's eagle_config ids are layer
  // outputs (SGLang captures the input of id + 1), keel's own; vLLM's top-level ids (its
  // speculators format) index the layer whose input is captured (id j: the output of layer
  // j - 1; 0 would be the embedding, which keel does not return).
  if (j.contains("eagle_aux_hidden_state_layer_ids") &&
      !j["eagle_aux_hidden_state_layer_ids"].is_null()) {
    const json &ids = j["eagle_aux_hidden_state_layer_ids"];
    if (!ids.is_array() || ids.empty())
      fail(origin, "eagle_aux_hidden_state_layer_ids: not a list of layer ids");
    for (const auto &id : ids) {
      if (!id.is_number_integer())
        fail(origin, "eagle_aux_hidden_state_layer_ids: not a list of layer ids");
      const auto v = id.get<std::int32_t>();
      if (v < 1)
        fail(origin, "eagle_aux_hidden_state_layer_ids: " + std::to_string(v) +
                         " (vLLM's indexing: the input of that layer) names the embedding, "
                         "which keel does not hand a head");
      c.aux_layer_ids.push_back(v - 1);
    }
  }
  if (c.aux_layer_ids.empty() && j.contains("eagle_config") && j["eagle_config"].is_object()) {
    const json &e = j["eagle_config"];
    if (e.contains("eagle_aux_hidden_state_layer_ids") &&
        !e["eagle_aux_hidden_state_layer_ids"].is_null()) {
      const json &ids = e["eagle_aux_hidden_state_layer_ids"];
      if (!ids.is_array() || ids.empty())
        fail(origin, "eagle_config.eagle_aux_hidden_state_layer_ids: not a list of layer ids");
      for (const auto &id : ids) {
        if (!id.is_number_integer())
          fail(origin, "eagle_config.eagle_aux_hidden_state_layer_ids: not a list of layer ids");
        c.aux_layer_ids.push_back(id.get<std::int32_t>());
      }
    }
  }
  return c;
}

Eagle3Config load_eagle3_config(const std::filesystem::path &dir) {
  const auto path = dir / "config.json";
  std::ifstream f(path);
  if (!f) throw Error(ErrorCode::kNotFound, path.string() + ": cannot read the head's config");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_eagle3_config(ss.str(), path.string());
}

std::vector<std::int32_t> eagle3_aux_layers(const Eagle3Config &config,
                                            std::int64_t target_layers) {
  std::vector<std::int32_t> ids = config.aux_layer_ids;
  const char *field = "eagle_aux_hidden_state_layer_ids (as layer outputs)";
  if (ids.empty()) {
    field = "the default aux layers (outputs of 1, L/2 - 1, L - 4)";
    const auto L = static_cast<std::int32_t>(target_layers);
    ids = {1, L / 2 - 1, L - 4};
  }
  for (const std::int32_t id : ids)
    if (id < 0 || id >= target_layers)
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(field) + ": layer " + std::to_string(id) +
                      " is outside the target's " + std::to_string(target_layers) + " layers");
  return ids;
}

}  // namespace keel
