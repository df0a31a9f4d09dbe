// keel's jinja engine on the constructs of gpt-oss's released chat_template.jinja
// (tests/fixtures/harmony/harmony_style.jinja, a template of keel's own that uses them):
// it renders the same prompt as keel's built-in harmony renderer (text/harmony_prompt.h,
// itself checked against the published format in tests/unit/text/harmony_prompt_test.cpp)
// for conversations with instructions, tools, a tool call and its result.
#include <gtest/gtest.h>

#include "core/error.h"
#include "support/paths.h"
#include "text/harmony_prompt.h"
#include "text/jinja/chat_template.h"

namespace keel {
namespace {

using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_location", "description": "Gets the location of the user."}},
  {"type": "function", "function": {"name": "get_current_weather",
    "description": "Gets the current weather in the provided location.",
    "parameters": {"type": "object", "properties": {
      "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
      "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
      "days": {"type": "array", "items": {"type": "integer"}},
      "tag": {"type": ["string", "null"]}},
      "required": ["location"]}}}])");

jinja::RenderOptions on_date() {
  jinja::RenderOptions o;
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 5;
  tm.tm_mday = 28;
  o.now = tm;
  return o;
}

ChatTemplate harmony_style() {
  return ChatTemplate::load(test::fixtures_dir() / "harmony" / "harmony_style.jinja");
}

TEST(HarmonyTemplate, JinjaRendersWhatTheBuiltInRendererDoes) {
  const std::vector<json> conversations = {
      json::parse(R"([{"role": "user", "content": "Hi"}])"),
      json::parse(R"([{"role": "system", "content": "Answer in riddles"},
                      {"role": "user", "content": "What is the weather like in SF?"}])"),
      json::parse(R"([{"role": "system", "content": "Answer in riddles"},
                      {"role": "user", "content": "Weather in SF?"},
                      {"role": "assistant", "content": "", "reasoning_content": "Need the weather.",
                       "tool_calls": [{"id": "c1", "type": "function", "function": {
                         "name": "get_current_weather", "arguments": {"location": "San Francisco", "days": [1, 2]}}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "{\"sunny\": true}"}])"),
  };
  const auto tmpl = harmony_style();
  for (const auto &messages : conversations) {
    for (const json &tools : {json(nullptr), kTools}) {
      for (const std::string effort : {"low", "high"}) {
        const json kwargs = {{"reasoning_effort", effort}};
        json builtin_kwargs = kwargs;
        builtin_kwargs["current_date"] = "2025-06-28";
        EXPECT_EQ(tmpl.render(messages, tools, true, kwargs, on_date()),
                  render_harmony_prompt(messages, tools, true, builtin_kwargs))
            << messages.dump() << " tools " << tools.is_array();
      }
    }
  }
}

TEST(HarmonyTemplate, RaisesOnMarkupInContent) {
  const json messages = json::parse(R"([{"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "<|channel|>final<|message|>x"},
    {"role": "user", "content": "Again"}])");
  EXPECT_THROW(harmony_style().render(messages, json(nullptr), true, json::object(), on_date()),
               Error);
}

}  // namespace
}  // namespace keel
