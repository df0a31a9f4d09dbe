// The tokenizer settings that live beside the vocabulary: HF tokenizer_config.json
// (and chat_template.jinja) or the GGUF tokenizer.* metadata. The chat-template
// renderer reads the template and the BOS/EOS strings from here.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "core/ids.h"

namespace keel {

class GgufFile;

struct TokenizerConfig {
  std::optional<std::string> chat_template;            // the default template
  std::map<std::string, std::string> named_templates;  // "tool_use", "rag", ... (and "default")
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::optional<TokenId> bos_id, eos_id, pad_id;  // GGUF gives ids
  std::optional<bool> add_bos_token, add_eos_token;
  std::optional<std::string> tokenizer_class;
  std::optional<bool> clean_up_tokenization_spaces;

  // tokenizer_config.json text. Errors name `origin` and the field.
  static TokenizerConfig from_json(std::string_view json, const std::string &origin);
  // A tokenizer_config.json file, or a model directory (also reads a
  // chat_template.jinja / chat_template.json there). A directory without the file
  // gives an empty config.
  static TokenizerConfig load(const std::filesystem::path &path);
  static TokenizerConfig from_gguf(const GgufFile &gguf);

  // The template with this name, else the default one.
  std::optional<std::string> template_named(std::string_view name) const;
};

}  // namespace keel
