#include "server/chat_prompt.h"

#include "core/error.h"
#include "server/json_fields.h"
#include "text/harmony_prompt.h"
#include "text/reasoning_parser.h"
#include "text/tool_prompt.h"

namespace keel::server {

using json = nlohmann::ordered_json;

ToolCallFormat tool_call_format_of(const ModelText &text) {
  return detect_tool_call_format(
      [&text](std::string_view s) { return text.encode(s, false).size(); });
}

namespace {

// gpt-oss's released template reads an assistant's reasoning from `thinking` (and keeps
// it only in a tool-calling turn, refusing one that has both content and thinking), where
// keel's messages carry reasoning_content: a tool-calling turn without content gets it
// under that name too.
json with_harmony_thinking(const json &messages) {
  json out = messages;
  for (auto &m : out) {
    if (!m.is_object() || m.value("role", std::string()) != "assistant" ||
        !m.contains("tool_calls") || m.contains("thinking"))
      continue;
    auto r = m.find("reasoning_content");
    auto c = m.find("content");
    // (json::empty() is false for every string: compare the text.)
    const bool no_content = c == m.end() || c->is_null() || *c == "";
    if (r != m.end() && r->is_string() && *r != "" && no_content) m["thinking"] = *r;
  }
  return out;
}

}  // namespace

std::string render_chat_prompt(const ModelText &text, const json &given, const json &tools,
                               const json &kwargs, bool add_generation_prompt) {
  const bool has_tools = tools.is_array() && !tools.empty();
  const bool harmony = tool_call_format_of(text) == ToolCallFormat::kHarmony;
  // A gpt-oss vocabulary without a template of its own: the harmony format, which has
  // its own tools section.
  if (!text.has_chat_template() && harmony)
    return render_harmony_prompt(given, tools, add_generation_prompt, kwargs);
  const json &messages = harmony ? with_harmony_thinking(given) : given;
  if (text.has_chat_template()) {
    std::string with_tools = text.render_chat(messages, tools, add_generation_prompt, kwargs);
    // A template with no tools section renders the same text with and without them.
    if (!has_tools ||
        with_tools != text.render_chat(messages, json(nullptr), add_generation_prompt, kwargs))
      return with_tools;
  }
  const json msgs =
      has_tools ? inject_tool_prompt(messages, tools, tool_call_format_of(text)) : messages;
  if (text.has_chat_template())
    return text.render_chat(msgs, json(nullptr), add_generation_prompt, kwargs);
  std::string out;
  for (const auto &m : msgs)
    out += m.value("role", std::string("user")) + ": " + m.value("content", std::string()) + "\n";
  if (add_generation_prompt) out += "assistant:";
  return out;
}

ChatPrompt encode_chat_prompt(const ModelText &text, const json &messages, const json &tools,
                              const json &kwargs, const std::string &field) {
  std::string prompt;
  try {
    prompt = render_chat_prompt(text, messages, tools, kwargs);
  } catch (const Error &e) {
    fail_field(field, std::string("the chat template rejected them: ") + e.what());
  }
  ChatPrompt p;
  p.opens_reasoning = prompt_opens_reasoning(prompt);
  // Templates write the BOS themselves; the fallback relies on the tokenizer adding it.
  // Harmony has no BOS.
  const bool bos =
      !text.has_chat_template() && tool_call_format_of(text) != ToolCallFormat::kHarmony;
  p.tokens = text.encode(prompt, bos);
  return p;
}

}  // namespace keel::server
