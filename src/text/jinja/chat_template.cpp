#include "text/jinja/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/tokenizer_config.h"
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
  const bool gguf = path.extension() == ".gguf";
  if (!gguf && !fs::is_directory(path) && path.extension() != ".json")
    return ChatTemplate(read_file(path), std::nullopt, std::nullopt);
  auto t = from_config(gguf ? TokenizerConfig::from_gguf(*GgufFile::open(path))
                            : TokenizerConfig::load(path));
  if (t) return std::move(*t);
  if (gguf) throw Error(ErrorCode::kNotFound, path.string() + ": no tokenizer.chat_template");
  if (fs::is_directory(path))
    throw Error(
        ErrorCode::kNotFound,
        path.string() + ": no chat template (chat_template.jinja or tokenizer_config.json)");
  throw Error(ErrorCode::kFormat, path.string() + ": no chat_template field");
}

std::optional<ChatTemplate> ChatTemplate::from_config(const TokenizerConfig &config) {
  std::vector<std::pair<std::string, std::string>> named;
  if (config.chat_template) named.emplace_back("default", *config.chat_template);
  for (const auto &[name, source] : config.named_templates)
    if (name != "default") named.emplace_back(name, source);
  if (named.empty()) return std::nullopt;
  return ChatTemplate(std::move(named), config.bos_token, config.eos_token);
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
