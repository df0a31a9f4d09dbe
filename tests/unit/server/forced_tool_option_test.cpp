// --force-tool-call (tests only): parsed from MODEL:TOOL[=JSON]; forces a call only for
// its model, a request offering the tool and not answering a tool result; fixed
// arguments must match the tool's schema and become the only call the grammar admits.
#include "server/forced_tool_option.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/compiled_grammar.h"
#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "server/json_fields.h"

namespace keel::server {
namespace {

using json = nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "Bash", "parameters": {"type": "object",
    "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
    "required": ["command"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "Read"}}])");

const json kUserTurn = json::parse(R"([{"role": "user", "content": "hi"}])");

bool admits(const SamplingParams &s, std::string_view doc) {
  const auto kind = grammar::parse_constraint_kind(s.constraint_kind);
  auto g = std::make_shared<const grammar::CompiledGrammar>(
      grammar::compile_grammar({*kind, s.constraint_text}), nullptr);
  grammar::GrammarMatcher m(g);
  return m.accept_bytes(doc) && m.is_complete();
}

TEST(ForcedToolOption, ParsesModelToolAndArguments) {
  auto o = parse_forced_tool_option("org:model:Bash={\"command\":\"echo hi\"}");
  EXPECT_EQ(o.model, "org:model");
  EXPECT_EQ(o.tool, "Bash");
  ASSERT_TRUE(o.arguments);
  EXPECT_EQ((*o.arguments)["command"], "echo hi");
  EXPECT_FALSE(parse_forced_tool_option("m:Read").arguments);
  for (const char *bad : {"Bash", ":Bash", "m:", "m:Bash=[1]", "m:Bash={"})
    EXPECT_THROW(parse_forced_tool_option(bad), Error) << bad;
}

TEST(ForcedToolOption, FixedArgumentsAreTheOnlyCallAdmitted) {
  auto o = parse_forced_tool_option("m:Bash={\"command\":\"echo hi\"}");
  SamplingParams s;
  ASSERT_TRUE(apply_forced_tool_option(o, "m", s, ToolCallFormat::kHermes, kTools, kUserTurn));
  EXPECT_TRUE(admits(s,
                     "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\":\"echo "
                     "hi\"}}\n</tool_call>"));
  EXPECT_FALSE(admits(s,
                      "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\":\"rm "
                      "x\"}}\n</tool_call>"));
}

TEST(ForcedToolOption, OnlyItsModelAToolItOffersAndATurnWithoutAToolResult) {
  auto o = parse_forced_tool_option("m:Read");
  SamplingParams s;
  EXPECT_FALSE(apply_forced_tool_option(o, "other", s, ToolCallFormat::kHermes, kTools, kUserTurn));
  EXPECT_FALSE(apply_forced_tool_option(parse_forced_tool_option("m:Write"), "m", s,
                                        ToolCallFormat::kHermes, kTools, kUserTurn));
  const json answered = json::parse(R"([{"role": "user", "content": "hi"},
    {"role": "assistant", "content": "", "tool_calls": []},
    {"role": "tool", "tool_call_id": "c1", "content": "out"},
    {"role": "user", "content": "and?"}])");
  EXPECT_FALSE(apply_forced_tool_option(o, "m", s, ToolCallFormat::kHermes, kTools, answered));
  EXPECT_TRUE(s.constraint_kind.empty());
  ASSERT_TRUE(apply_forced_tool_option(o, "m", s, ToolCallFormat::kHermes, kTools, kUserTurn));
  EXPECT_TRUE(
      admits(s, "<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"a\": 1}}\n</tool_call>"));
  // A request that constrains its own output keeps its constraint.
  SamplingParams own;
  own.constraint_kind = "json_object";
  EXPECT_FALSE(apply_forced_tool_option(o, "m", own, ToolCallFormat::kHermes, kTools, kUserTurn));
  EXPECT_EQ(own.constraint_kind, "json_object");
}

TEST(ForcedToolOption, ArgumentsTheSchemaRejectsAreA400NamingTools) {
  auto o = parse_forced_tool_option("m:Bash={\"cmd\":\"echo hi\"}");
  SamplingParams s;
  try {
    apply_forced_tool_option(o, "m", s, ToolCallFormat::kHermes, kTools, kUserTurn);
    FAIL() << "no error";
  } catch (const ApiErrorException &e) {
    EXPECT_EQ(e.error.status, 400);
    EXPECT_NE(e.error.message.find("tools"), std::string::npos) << e.error.message;
  }
}

}  // namespace
}  // namespace keel::server
