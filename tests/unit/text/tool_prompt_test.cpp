// Tools written into the prompt for templates that cannot render them, in each model
// family's format, and read back by the tool-call parser of the same format.
#include "text/tool_prompt.h"

#include <gtest/gtest.h>

#include "text/tool_call_parser.h"

using namespace keel;
using json = nlohmann::ordered_json;

namespace {

const json kTools = json::parse(R"([{"type":"function","function":{"name":"get_weather",
  "description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},
  "required":["city"]}}}])");

// A conversation with a call and its result.
const json kTurns = json::parse(R"([
  {"role":"system","content":"Be brief."},
  {"role":"user","content":"Weather in Paris?"},
  {"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function",
    "function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
  {"role":"tool","tool_call_id":"call_1","content":"sunny, 21 C"},
  {"role":"tool","tool_call_id":"call_2","content":"windy"},
  {"role":"user","content":"Thanks"}])");

bool has(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST(ToolPrompt, HermesPutsTheSchemasInTheSystemPrompt) {
  const json out = inject_tool_prompt(kTurns, kTools, ToolCallFormat::kHermes);
  ASSERT_EQ(out[0]["role"], "system");
  const std::string sys = out[0]["content"];
  EXPECT_EQ(sys.rfind("Be brief.\n\n# Tools", 0), 0u) << sys;
  EXPECT_TRUE(has(sys, "<tools>\n" + kTools[0].dump() + "\n</tools>")) << sys;
  EXPECT_TRUE(has(sys, "<tool_call>")) << sys;
}

TEST(ToolPrompt, HermesHistoryIsPlainTurnsTheParserReadsBack) {
  const json out = inject_tool_prompt(kTurns, kTools, ToolCallFormat::kHermes);
  // system, user, assistant (with the call as text), one user turn for both results, user
  ASSERT_EQ(out.size(), 5u) << out.dump(1);
  EXPECT_EQ(out[2]["role"], "assistant");
  EXPECT_FALSE(out[2].contains("tool_calls"));
  const std::string call = out[2]["content"];
  const auto parsed = parse_tool_calls(call, ToolCallFormat::kHermes, {"get_weather"});
  ASSERT_EQ(parsed.calls.size(), 1u) << call;
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(parsed.calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_EQ(out[3]["role"], "user");
  EXPECT_EQ(out[3]["content"],
            "<tool_response>\nsunny, 21 C\n</tool_response>\n<tool_response>\nwindy\n"
            "</tool_response>");
  for (const auto &m : out) EXPECT_NE(m["role"], "tool");
}

TEST(ToolPrompt, NoSystemTurnGetsOne) {
  const json msgs = json::parse(R"([{"role":"user","content":"hi"}])");
  const json out = inject_tool_prompt(msgs, kTools, ToolCallFormat::kNone);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["role"], "system");
  EXPECT_EQ(std::string(out[0]["content"]).rfind("# Tools", 0), 0u);
  EXPECT_EQ(out[1], msgs[0]);
}

TEST(ToolPrompt, Llama3AsksForNameAndParametersJson) {
  const json out = inject_tool_prompt(kTurns, kTools, ToolCallFormat::kLlama3Json);
  const std::string sys = out[0]["content"];
  EXPECT_TRUE(has(sys, "\"parameters\": dictionary")) << sys;
  EXPECT_TRUE(has(sys, kTools[0].dump())) << sys;
  const auto parsed = parse_tool_calls(out[2]["content"].get<std::string>(),
                                       ToolCallFormat::kLlama3Json, {"get_weather"});
  ASSERT_EQ(parsed.calls.size(), 1u) << out[2].dump();
  EXPECT_EQ(parsed.calls[0].name, "get_weather");
}

TEST(ToolPrompt, MistralListsToolsBeforeTheLastUserTurn) {
  const json out = inject_tool_prompt(kTurns, kTools, ToolCallFormat::kMistral);
  EXPECT_EQ(out[0]["content"], "Be brief.");  // the system prompt is left alone
  const std::string last = out.back()["content"];
  EXPECT_EQ(last, "[AVAILABLE_TOOLS]" + kTools.dump() + "[/AVAILABLE_TOOLS]Thanks");
  const auto parsed = parse_tool_calls(out[2]["content"].get<std::string>(),
                                       ToolCallFormat::kMistral, {"get_weather"});
  ASSERT_EQ(parsed.calls.size(), 1u) << out[2].dump();
  EXPECT_TRUE(has(out[3]["content"], "[TOOL_RESULTS]")) << out[3].dump();
}

TEST(ToolPrompt, StringArgumentsAreWrittenAsJson) {
  json turns = kTurns;
  turns[2]["tool_calls"][0]["function"]["arguments"] = "{\"city\": \"Oslo\"}";
  const json out = inject_tool_prompt(turns, kTools, ToolCallFormat::kHermes);
  EXPECT_TRUE(
      has(out[2]["content"], "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}"))
      << out[2].dump();
}

TEST(ToolPrompt, NoToolsChangesOnlyTheToolTurns) {
  const json msgs = json::parse(R"([{"role":"user","content":"hi"}])");
  EXPECT_EQ(inject_tool_prompt(msgs, json(nullptr), ToolCallFormat::kHermes), msgs);
}
