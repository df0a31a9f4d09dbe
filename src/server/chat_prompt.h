// Chat messages to prompt tokens, shared by every chat-shaped endpoint (chat
// completions, messages, count_tokens, responses, /tokenize): the model's chat template
// with extra template variables, the request's tools injected as text when the
// template has no tools section (text/tool_prompt.h), and whether the prompt leaves
// the model inside a thinking block (for the reasoning split of the output).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/ids.h"
#include "registry/model_text.h"
#include "text/tool_call_parser.h"

namespace keel::server {

// The tool-call format of a model, from its vocabulary (kHermes when none stands out).
ToolCallFormat tool_call_format_of(const ModelText &text);

// The prompt text for chat messages: the model's chat template, or for models that ship
// none the harmony format (a gpt-oss vocabulary, text/harmony_prompt.h) or a plain
// fallback ("role: content" lines ending in "assistant:"). kwargs: extra
// template variables (an object, e.g. {"enable_thinking": true}). Tools the template
// cannot render are written into the messages in the model family's format (the same
// text for /apply-template, /tokenize and count_tokens as for generation).
std::string render_chat_prompt(
    const ModelText &text, const nlohmann::ordered_json &messages,
    const nlohmann::ordered_json &tools,
    const nlohmann::ordered_json &kwargs = nlohmann::ordered_json::object(),
    bool add_generation_prompt = true);

struct ChatPrompt {
  std::vector<TokenId> tokens;
  bool opens_reasoning = false;  // the prompt ends inside a <think> block
};

// Renders and encodes; a template that rejects the messages is a 400 naming `field`.
ChatPrompt encode_chat_prompt(
    const ModelText &text, const nlohmann::ordered_json &messages,
    const nlohmann::ordered_json &tools,
    const nlohmann::ordered_json &kwargs = nlohmann::ordered_json::object(),
    const std::string &field = "messages");

}  // namespace keel::server
