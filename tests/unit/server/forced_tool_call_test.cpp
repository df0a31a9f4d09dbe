// Forced tool calls: the constraint admits exactly the calls of the allowed tools in the
// model's own markup, and what it admits the tool-call parser reads back as a call.
#include "server/forced_tool_call.h"

#include <gtest/gtest.h>

#include "grammar/matcher.h"

namespace keel::server {
namespace {

using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "now"}}])");

bool admits(const grammar::Constraint &c, std::string_view doc) {
  auto g = std::make_shared<const grammar::CompiledGrammar>(grammar::compile_grammar(c), nullptr);
  grammar::GrammarMatcher m(g);
  return m.accept_bytes(doc) && m.is_complete();
}

std::vector<ParsedToolCall> parse(ToolCallFormat f, std::string_view text) {
  ToolCallParser p(f, {"get_weather", "now"});
  std::vector<ParsedToolCall> calls;
  auto events = p.feed(text);
  for (auto &e : p.finish()) events.push_back(std::move(e));
  for (auto &e : events)
    if (e.kind == ToolParseEvent::Kind::kCall) calls.push_back(e.call);
  return calls;
}

struct Case {
  ToolCallFormat format;
  std::string weather_call;  // a call of get_weather in the format
  std::string now_call;      // a call of now (no parameters schema: any object)
};

class ForcedToolCall : public testing::TestWithParam<Case> {};

TEST_P(ForcedToolCall, AdmitsTheAllowedCallsAndTheParserReadsThem) {
  const Case &c = GetParam();
  const auto any = forced_tool_call_constraint(c.format, kTools, "");
  EXPECT_TRUE(admits(any, c.weather_call)) << c.weather_call;
  EXPECT_TRUE(admits(any, c.now_call)) << c.now_call;
  const auto named = forced_tool_call_constraint(c.format, kTools, "get_weather");
  EXPECT_TRUE(admits(named, c.weather_call));
  EXPECT_FALSE(admits(named, c.now_call));
  EXPECT_FALSE(admits(any, "The weather is fine."));

  auto calls = parse(c.format, c.weather_call);
  ASSERT_EQ(calls.size(), 1u) << c.weather_call;
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(calls[0].arguments), json({{"city", "Oslo"}}));
  calls = parse(c.format, c.now_call);
  ASSERT_EQ(calls.size(), 1u) << c.now_call;
  EXPECT_EQ(calls[0].name, "now");
}

TEST_P(ForcedToolCall, RefusesArgumentsOffTheSchema) {
  const Case &c = GetParam();
  const auto named = forced_tool_call_constraint(c.format, kTools, "get_weather");
  std::string bad = c.weather_call;
  bad.replace(bad.find("\"Oslo\""), 6, "7");  // city must be a string
  EXPECT_FALSE(admits(named, bad)) << bad;
}

INSTANTIATE_TEST_SUITE_P(
    Formats, ForcedToolCall,
    testing::Values(
        Case{ToolCallFormat::kHermes,
             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
             "\"Oslo\"}}\n</tool_call>",
             "<tool_call>\n{\"name\": \"now\", \"arguments\": {\"tz\": 1}}\n</tool_call>"},
        Case{ToolCallFormat::kLlama3Json,
             "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
             "{\"name\": \"now\", \"parameters\": {}}"},
        Case{ToolCallFormat::kMistral,
             "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
             "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]"},
        Case{ToolCallFormat::kHarmony,
             "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
             "{\"city\": \"Oslo\"}",
             "<|channel|>commentary to=functions.now <|constrain|>json<|message|>{}"}));

}  // namespace
}  // namespace keel::server
