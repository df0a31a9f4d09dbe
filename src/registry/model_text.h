// What the front needs of a model's text side: tokenize, detokenize (also incrementally,
// UTF-8 safe), and render chat messages with the model's template. The front never
// touches tensors; this is everything it knows about a model besides the engine's hello.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/ids.h"

namespace keel {

// Turns a stream of token ids into text pieces that never split a UTF-8 character.
class StreamingDetokenizer {
 public:
  virtual ~StreamingDetokenizer() = default;
  virtual std::string push(TokenId token) = 0;
  virtual std::string flush() = 0;  // what is held back at the end
};

class ModelText {
 public:
  virtual ~ModelText() = default;
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(const std::vector<TokenId> &ids) const = 0;
  // One token's text for logprob listings (may be part of a UTF-8 character).
  virtual std::string token_text(TokenId id) const = 0;
  virtual std::unique_ptr<StreamingDetokenizer> streaming() const = 0;
  virtual bool has_chat_template() const = 0;
  // messages: [{role, content}], content a string (or OpenAI content parts already
  // flattened to a string); tools: an array or null. Throws Error(kInvalidArgument)
  // when the template rejects the input (it raised an exception).
  virtual std::string render_chat(const nlohmann::ordered_json &messages,
                                  const nlohmann::ordered_json &tools,
                                  bool add_generation_prompt) const = 0;
  // The same with extra template variables (an object, e.g. {"enable_thinking": false}),
  // as HF's apply_chat_template(**kwargs) takes them. Models whose templates take none
  // may leave this to the plain render.
  virtual std::string render_chat(const nlohmann::ordered_json &messages,
                                  const nlohmann::ordered_json &tools, bool add_generation_prompt,
                                  const nlohmann::ordered_json &kwargs) const {
    (void)kwargs;
    return render_chat(messages, tools, add_generation_prompt);
  }
  // Whether the rendered chat text already holds the BOS token (so encode must not add it).
  virtual bool chat_adds_bos() const { return true; }
  virtual std::int64_t vocab_size() const = 0;
};

// Loads the tokenizer and chat template of an HF model directory or a GGUF file.
// Throws Error(kFormat / kNotFound) naming the file.
std::unique_ptr<ModelText> load_model_text(const std::filesystem::path &model_path);

}  // namespace keel
