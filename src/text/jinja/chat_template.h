// A model's chat template: renders a conversation (OpenAI-style messages, optional
// tools) into the prompt text exactly as HF transformers' apply_chat_template(...,
// tokenize=False) does, with bos_token/eos_token and extra template kwargs such as
// enable_thinking.
//
// Pass messages and tools as nlohmann::ordered_json (or JSON text) so that object keys
// keep their order: templates print tool schemas with tojson, and HF keeps the order
// the client sent.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/template.h"

namespace keel {

struct TokenizerConfig;

class ChatTemplate {
 public:
  // One template source; bos/eos are left undefined in the template when absent.
  ChatTemplate(std::string_view source, std::optional<std::string> bos_token,
               std::optional<std::string> eos_token);

  // PATH: an HF model directory (chat_template.jinja, chat_template.json or the
  // chat_template of tokenizer_config.json; bos/eos from tokenizer_config.json), a
  // tokenizer_config.json, a GGUF file, or a .jinja file. Throws Error(kNotFound/kFormat)
  // naming it.
  static ChatTemplate load(const std::filesystem::path &path);
  // The templates and bos/eos of a tokenizer config (formats/tokenizer_config.h, the one
  // reader of them); none when it holds no template.
  static std::optional<ChatTemplate> from_config(const TokenizerConfig &config);

  // Named templates as tokenizer_config.json may list them ("default", "tool_use"):
  // render() uses "tool_use" when tools are given and it exists, else "default".
  ChatTemplate(std::vector<std::pair<std::string, std::string>> named_sources,
               std::optional<std::string> bos_token, std::optional<std::string> eos_token);

  // messages: array of message objects; tools: array or null; kwargs: object (or null)
  // of extra template variables. Throws Error naming the template line when the
  // template raises (e.g. roles that do not alternate) or uses what keel lacks.
  std::string render(const nlohmann::ordered_json &messages, const nlohmann::ordered_json &tools,
                     bool add_generation_prompt,
                     const nlohmann::ordered_json &kwargs = nlohmann::ordered_json::object(),
                     const jinja::RenderOptions &options = {}) const;

  const std::optional<std::string> &bos_token() const { return bos_; }
  const std::optional<std::string> &eos_token() const { return eos_; }
  std::vector<std::string> names() const;

 private:
  std::vector<std::pair<std::string, std::shared_ptr<const jinja::Template>>> templates_;
  std::optional<std::string> bos_;
  std::optional<std::string> eos_;
};

}  // namespace keel
