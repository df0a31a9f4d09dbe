#include "formats/tokenizer_config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "formats/gguf.h"

namespace keel {

namespace {

using nlohmann::json;

std::string read_file(const std::filesystem::path &p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error(ErrorCode::kNotFound, p.string() + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "bos_token": "<s>" or {"content": "<s>", ...} (an AddedToken object) or null.
std::optional<std::string> token_string(const json &root, const char *key,
                                        const std::string &origin) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  throw Error(ErrorCode::kFormat,
              origin + ": " + key + ": expected a string or an AddedToken object");
}

std::optional<bool> opt_bool(const json &root, const char *key, const std::string &origin) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean())
    throw Error(ErrorCode::kFormat, origin + ": " + key + ": expected a boolean");
  return it->get<bool>();
}

void read_templates(const json &v, TokenizerConfig &cfg, const std::string &origin,
                    const std::string &field) {
  if (v.is_null()) return;
  if (v.is_string()) {
    cfg.chat_template = v.get<std::string>();
    return;
  }
  if (!v.is_array())
    throw Error(ErrorCode::kFormat, origin + ": " + field + ": expected a string or a list");
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json &t = v[i];
    const std::string path = field + "[" + std::to_string(i) + "]";
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string() ||
        !t.contains("template") || !t["template"].is_string())
      throw Error(ErrorCode::kFormat, origin + ": " + path + ": expected {name, template}");
    const std::string name = t["name"];
    cfg.named_templates[name] = t["template"].get<std::string>();
    if (name == "default") cfg.chat_template = cfg.named_templates[name];
  }
}

}  // namespace

TokenizerConfig TokenizerConfig::from_json(std::string_view text, const std::string &origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception &e) {
    throw Error(ErrorCode::kFormat, origin + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) throw Error(ErrorCode::kFormat, origin + ": expected an object");
  TokenizerConfig cfg;
  if (auto it = root.find("chat_template"); it != root.end())
    read_templates(*it, cfg, origin, "chat_template");
  cfg.bos_token = token_string(root, "bos_token", origin);
  cfg.eos_token = token_string(root, "eos_token", origin);
  cfg.pad_token = token_string(root, "pad_token", origin);
  cfg.unk_token = token_string(root, "unk_token", origin);
  cfg.add_bos_token = opt_bool(root, "add_bos_token", origin);
  cfg.add_eos_token = opt_bool(root, "add_eos_token", origin);
  cfg.clean_up_tokenization_spaces = opt_bool(root, "clean_up_tokenization_spaces", origin);
  if (auto it = root.find("tokenizer_class"); it != root.end() && it->is_string())
    cfg.tokenizer_class = it->get<std::string>();
  return cfg;
}

TokenizerConfig TokenizerConfig::load(const std::filesystem::path &path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path)) return from_json(read_file(path), path.string());
  TokenizerConfig cfg;
  if (fs::exists(path / "tokenizer_config.json"))
    cfg = from_json(read_file(path / "tokenizer_config.json"),
                    (path / "tokenizer_config.json").string());
  // Newer HF repositories keep the template in its own file, which wins over
  // tokenizer_config.json's (as transformers loads them).
  if (fs::exists(path / "chat_template.jinja")) {
    cfg.chat_template = read_file(path / "chat_template.jinja");
    cfg.named_templates.clear();
  } else if (fs::exists(path / "chat_template.json")) {
    const auto p = path / "chat_template.json";
    json j;
    try {
      j = json::parse(read_file(p));
    } catch (const json::exception &e) {
      throw Error(ErrorCode::kFormat, p.string() + ": not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("chat_template"))
      throw Error(ErrorCode::kFormat, p.string() + ": no chat_template field");
    cfg.chat_template.reset();
    cfg.named_templates.clear();
    read_templates(j["chat_template"], cfg, p.string(), "chat_template");
  }
  return cfg;
}

TokenizerConfig TokenizerConfig::from_gguf(const GgufFile &g) {
  TokenizerConfig cfg;
  if (auto t = g.get_opt_string("tokenizer.chat_template")) cfg.chat_template = std::string(*t);
  // Named templates: tokenizer.chat_template.<name>.
  for (const auto &[key, value] : g.metadata()) {
    constexpr std::string_view prefix = "tokenizer.chat_template.";
    if (key.starts_with(prefix) && value.is_string())
      cfg.named_templates[key.substr(prefix.size())] = std::string(*value.as_string());
  }
  const GgufValue *tokens = g.get_opt_array("tokenizer.ggml.tokens");
  auto id_of = [&](const char *key) -> std::optional<TokenId> {
    auto v = g.get_opt_i64(key);
    if (!v || *v < 0 || (tokens && static_cast<std::size_t>(*v) >= tokens->size()))
      return std::nullopt;
    return static_cast<TokenId>(*v);
  };
  cfg.bos_id = id_of("tokenizer.ggml.bos_token_id");
  cfg.eos_id = id_of("tokenizer.ggml.eos_token_id");
  cfg.pad_id = id_of("tokenizer.ggml.padding_token_id");
  auto text_of = [&](std::optional<TokenId> id) -> std::optional<std::string> {
    if (!id || !tokens || !tokens->is_array() || tokens->elem_type() != GgufType::kString)
      return std::nullopt;
    return std::string(tokens->string_at(static_cast<std::size_t>(*id)));
  };
  cfg.bos_token = text_of(cfg.bos_id);
  cfg.eos_token = text_of(cfg.eos_id);
  cfg.pad_token = text_of(cfg.pad_id);
  cfg.add_bos_token = g.get_opt_bool("tokenizer.ggml.add_bos_token");
  cfg.add_eos_token = g.get_opt_bool("tokenizer.ggml.add_eos_token");
  return cfg;
}

std::optional<std::string> TokenizerConfig::template_named(std::string_view name) const {
  if (auto it = named_templates.find(std::string(name)); it != named_templates.end())
    return it->second;
  return chat_template;
}

}  // namespace keel
