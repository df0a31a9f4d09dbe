#include "text/jinja/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "text/jinja/json_value.h"

namespace keel {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_file(const std::filesystem::path &p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw Error(ErrorCode::kNotFound, p.string() + ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ojson read_json(const std::filesystem::path &p) {
  try {
    return ojson::parse(read_file(p));
  } catch (const nlohmann::json::exception &e) {
    throw Error(ErrorCode::kFormat, p.string() + ": not valid JSON: " + e.what());
  }
}

// bos_token / eos_token: a string, null, or an AddedToken object {"content": ...}.
std::optional<std::string> special_token(const ojson &config, const char *key,
                                         const std::filesystem::path &p) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  throw Error(ErrorCode::kFormat,
              p.string() + ": " + key + " is neither a string nor a token object");
}

// chat_template: a string, or a list of {"name", "template"} objects.
std::vector<std::pair<std::string, std::string>> templates_of(const ojson &v,
                                                              const std::filesystem::path &p) {
  std::vector<std::pair<std::string, std::string>> out;
  if (v.is_string()) {
    out.emplace_back("default", v.get<std::string>());
  } else if (v.is_array()) {
    for (const auto &e : v) {
      if (!e.is_object() || !e.contains("name") || !e.contains("template") ||
          !e["name"].is_string() || !e["template"].is_string())
        throw Error(ErrorCode::kFormat,
                    p.string() + ": chat_template list entries need string name and template");
      out.emplace_back(e["name"].get<std::string>(), e["template"].get<std::string>());
    }
  }
  if (out.empty())
    throw Error(ErrorCode::kFormat,
                p.string() + ": chat_template is neither a string nor a list of templates");
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::optional<std::string> bos_token,
                           std::optional<std::string> eos_token)
    : bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  templates_.emplace_back("default", std::make_shared<const jinja::Template>(source));
}

ChatTemplate::ChatTemplate(std::vector<std::pair<std::string, std::string>> named_sources,
                           std::optional<std::string> bos_token,
                           std::optional<std::string> eos_token)
    : bos_(std::move(bos_token)), eos_(std::move(eos_token)) {
  if (named_sources.empty())
    throw Error(ErrorCode::kInvalidArgument, "chat template: no template given");
  for (auto &ns : named_sources) {
    try {
      templates_.emplace_back(ns.first, std::make_shared<const jinja::Template>(ns.second));
    } catch (const Error &e) {
      throw Error(e.code(), "chat template '" + ns.first + "': " + e.what());
    }
  }
}

ChatTemplate ChatTemplate::load(const std::filesystem::path &path) {
  namespace fs = std::filesystem;
  if (!fs::exists(path))
    throw Error(ErrorCode::kNotFound, path.string() + ": no such file or directory");
  if (fs::is_directory(path)) {
    fs::path config_path = path / "tokenizer_config.json";
    ojson config = fs::exists(config_path) ? read_json(config_path) : ojson::object();
    if (!config.is_object())
      throw Error(ErrorCode::kFormat, config_path.string() + ": not a JSON object");
    auto bos = special_token(config, "bos_token", config_path);
    auto eos = special_token(config, "eos_token", config_path);
    if (fs::exists(path / "chat_template.jinja"))
      return ChatTemplate(read_file(path / "chat_template.jinja"), bos, eos);
    if (fs::exists(path / "chat_template.json")) {
      ojson ct = read_json(path / "chat_template.json");
      if (!ct.is_object() || !ct.contains("chat_template"))
        throw Error(ErrorCode::kFormat,
                    (path / "chat_template.json").string() + ": no chat_template field");
      return ChatTemplate(templates_of(ct["chat_template"], path / "chat_template.json"), bos, eos);
    }
    if (!config.contains("chat_template"))
      throw Error(
          ErrorCode::kNotFound,
          path.string() + ": no chat template (chat_template.jinja or tokenizer_config.json)");
    return ChatTemplate(templates_of(config["chat_template"], config_path), bos, eos);
  }
  if (path.extension() == ".json") {
    ojson config = read_json(path);
    if (!config.is_object() || !config.contains("chat_template"))
      throw Error(ErrorCode::kFormat, path.string() + ": no chat_template field");
    return ChatTemplate(templates_of(config["chat_template"], path),
                        special_token(config, "bos_token", path),
                        special_token(config, "eos_token", path));
  }
  return ChatTemplate(read_file(path), std::nullopt, std::nullopt);
}

std::vector<std::string> ChatTemplate::names() const {
  std::vector<std::string> out;
  for (const auto &t : templates_) out.push_back(t.first);
  return out;
}

std::string ChatTemplate::render(const ojson &messages, const ojson &tools,
                                 bool add_generation_prompt, const ojson &kwargs,
                                 const jinja::RenderOptions &options) const {
  if (!messages.is_array())
    throw Error(ErrorCode::kInvalidArgument, "chat template: messages must be an array");
  if (!tools.is_null() && !tools.is_array())
    throw Error(ErrorCode::kInvalidArgument, "chat template: tools must be an array or null");
  if (!kwargs.is_null() && !kwargs.is_object())
    throw Error(ErrorCode::kInvalidArgument, "chat template: kwargs must be an object");

  const jinja::Template *tpl = templates_.front().second.get();
  const char *want = tools.is_null() ? "default" : "tool_use";
  for (const auto &t : templates_)
    if (t.first == want) tpl = t.second.get();
  if (tools.is_null())
    for (const auto &t : templates_)
      if (t.first == "default") tpl = t.second.get();

  jinja::Dict ctx;
  if (bos_) ctx.set(jinja::Value("bos_token"), jinja::Value(*bos_));
  if (eos_) ctx.set(jinja::Value("eos_token"), jinja::Value(*eos_));
  if (kwargs.is_object())
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it)
      ctx.set(jinja::Value(it.key()), jinja::from_json(it.value()));
  ctx.set(jinja::Value("messages"), jinja::from_json(messages));
  ctx.set(jinja::Value("tools"), jinja::from_json(tools));
  ctx.set(jinja::Value("documents"), jinja::Value::none());
  ctx.set(jinja::Value("add_generation_prompt"), jinja::Value(add_generation_prompt));
  return tpl->render(jinja::Value::dict(std::move(ctx)), options);
}

}  // namespace keel
