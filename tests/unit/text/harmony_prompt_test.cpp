// keel's harmony prompt (text/harmony_prompt.h) against golden strings written from
// the harmony format's published description (OpenAI's "harmony response format"
// guide: its system and developer message with tools, tool call and result examples).
#include "text/harmony_prompt.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace keel {
namespace {

using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_location",
    "description": "Gets the location of the user."}},
  {"type": "function", "function": {"name": "get_current_weather",
    "description": "Gets the current weather in the provided location.",
    "parameters": {"type": "object", "properties": {
      "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
      "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
      "required": ["location"]}}},
  {"type": "function", "function": {"name": "get_multiple_weathers",
    "description": "Gets the current weather in the provided list of locations.",
    "parameters": {"type": "object", "properties": {
      "locations": {"type": "array", "items": {"type": "string"},
        "description": "List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]"},
      "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
      "required": ["locations"]}}}
])");

const json kKwargs = {{"reasoning_effort", "high"}, {"current_date", "2025-06-28"}};

const std::string kSystemWithTools =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\n"
    "Current date: 2025-06-28\n\n"
    "Reasoning: high\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every "
    "message.\n"
    "Calls to these tools must go to the commentary channel: 'functions'.<|end|>";

const std::string kDeveloper =
    "<|start|>developer<|message|># Instructions\n\n"
    "Always respond in riddles\n\n"
    "# Tools\n\n"
    "## functions\n\n"
    "namespace functions {\n\n"
    "// Gets the location of the user.\n"
    "type get_location = () => any;\n\n"
    "// Gets the current weather in the provided location.\n"
    "type get_current_weather = (_: {\n"
    "// The city and state, e.g. San Francisco, CA\n"
    "location: string,\n"
    "format?: \"celsius\" | \"fahrenheit\", // default: celsius\n"
    "}) => any;\n\n"
    "// Gets the current weather in the provided list of locations.\n"
    "type get_multiple_weathers = (_: {\n"
    "// List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]\n"
    "locations: string[],\n"
    "format?: \"celsius\" | \"fahrenheit\", // default: celsius\n"
    "}) => any;\n\n"
    "} // namespace functions<|end|>";

TEST(HarmonyPrompt, SystemDeveloperToolsAndUser) {
  const json messages = json::parse(R"([
    {"role": "system", "content": "Always respond in riddles"},
    {"role": "user", "content": "What is the weather like in SF?"}])");
  EXPECT_EQ(render_harmony_prompt(messages, kTools, true, kKwargs),
            kSystemWithTools + kDeveloper +
                "<|start|>user<|message|>What is the weather like in SF?<|end|>"
                "<|start|>assistant");
}

TEST(HarmonyPrompt, ToolCallAndResultKeepTheTurnsReasoning) {
  const json messages = json::parse(R"([
    {"role": "system", "content": "Always respond in riddles"},
    {"role": "user", "content": "What is the weather like in SF?"},
    {"role": "assistant", "content": null,
     "reasoning_content": "Need to use function get_current_weather.",
     "tool_calls": [{"id": "call_1", "type": "function", "function": {
       "name": "get_current_weather", "arguments": {"location": "San Francisco"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"sunny\": true, \"temperature\": 20}"}])");
  EXPECT_EQ(render_harmony_prompt(messages, kTools, true, kKwargs),
            kSystemWithTools + kDeveloper +
                "<|start|>user<|message|>What is the weather like in SF?<|end|>"
                "<|start|>assistant<|channel|>analysis<|message|>Need to use function "
                "get_current_weather.<|end|>"
                "<|start|>assistant<|channel|>commentary to=functions.get_current_weather "
                "<|constrain|>json<|message|>{\"location\":\"San Francisco\"}<|call|>"
                "<|start|>functions.get_current_weather to=assistant<|channel|>commentary"
                "<|message|>{\"sunny\": true, \"temperature\": 20}<|end|>"
                "<|start|>assistant");
}

TEST(HarmonyPrompt, EarlierTurnsLoseTheirReasoning) {
  const json messages = json::parse(R"([
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "4", "reasoning_content": "Simple arithmetic."},
    {"role": "user", "content": "And 3 + 3?"}])");
  const json kwargs = {{"current_date", "2025-06-28"}};
  EXPECT_EQ(render_harmony_prompt(messages, json(nullptr), true, kwargs),
            "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
            "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2025-06-28\n\nReasoning: "
            "medium\n\n# Valid channels: analysis, commentary, final. Channel must be included "
            "for every message.<|end|>"
            "<|start|>user<|message|>What is 2 + 2?<|end|>"
            "<|start|>assistant<|channel|>final<|message|>4<|end|>"
            "<|start|>user<|message|>And 3 + 3?<|end|>"
            "<|start|>assistant");
}

TEST(HarmonyPrompt, EffortNamesMapToHarmonysThree) {
  const json user = json::parse(R"([{"role": "user", "content": "hi"}])");
  for (const auto &[given, want] :
       std::vector<std::pair<std::string, std::string>>{{"minimal", "low"},
                                                        {"low", "low"},
                                                        {"medium", "medium"},
                                                        {"high", "high"},
                                                        {"xhigh", "high"},
                                                        {"max", "high"},
                                                        {"none", "low"}}) {
    const std::string p =
        render_harmony_prompt(user, json(nullptr), false, {{"reasoning_effort", given}});
    EXPECT_NE(p.find("\nReasoning: " + want + "\n"), std::string::npos) << given;
  }
}

TEST(HarmonyPrompt, NestedAndUnionTypes) {
  const json schema = json::parse(R"({"type": "object", "properties": {
    "point": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
    "tag": {"type": ["string", "null"]},
    "any": {}}})");
  EXPECT_EQ(harmony_type_of(schema, 0),
            "{\n  point?: {\n    x: number,\n  },\n  tag?: string | null,\n  any?: any,\n}");
}

}  // namespace
}  // namespace keel
