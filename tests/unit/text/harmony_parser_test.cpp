// The harmony output split (text/harmony_parser.h) and its use by the reasoning and
// tool-call parsers, fed whole, byte by byte and in every two-piece split.
#include "text/harmony_parser.h"

#include <gtest/gtest.h>

#include "text/reasoning_parser.h"
#include "text/tool_call_parser.h"

namespace keel {
namespace {

struct Split {
  std::string reasoning, content;
  std::vector<ParsedToolCall> calls;
};

Split collect(const std::vector<std::string> &chunks) {
  HarmonyParser p;
  Split s;
  auto take = [&](const std::vector<HarmonyEvent> &events) {
    for (const auto &e : events) {
      if (e.kind == HarmonyEvent::Kind::kReasoning) s.reasoning += e.text;
      if (e.kind == HarmonyEvent::Kind::kContent) s.content += e.text;
      if (e.kind == HarmonyEvent::Kind::kCall) s.calls.push_back(e.call);
    }
  };
  for (const auto &c : chunks) take(p.feed(c));
  take(p.finish());
  return s;
}

// The same result whole, byte by byte, and split in two anywhere.
Split parse_every_way(const std::string &text) {
  const Split whole = collect({text});
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  const Split by_byte = collect(bytes);
  EXPECT_EQ(by_byte.reasoning, whole.reasoning);
  EXPECT_EQ(by_byte.content, whole.content);
  EXPECT_EQ(by_byte.calls.size(), whole.calls.size());
  for (std::size_t k = 1; k < text.size(); ++k) {
    const Split two = collect({text.substr(0, k), text.substr(k)});
    EXPECT_EQ(two.reasoning, whole.reasoning) << "split at " << k;
    EXPECT_EQ(two.content, whole.content) << "split at " << k;
    EXPECT_EQ(two.calls.size(), whole.calls.size()) << "split at " << k;
  }
  return whole;
}

TEST(HarmonyParser, AnalysisThenFinal) {
  const Split s = parse_every_way(
      "<|channel|>analysis<|message|>User greets. Reply briefly.<|end|>"
      "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>");
  EXPECT_EQ(s.reasoning, "User greets. Reply briefly.");
  EXPECT_EQ(s.content, "Hello! How can I help?");
  EXPECT_TRUE(s.calls.empty());
}

TEST(HarmonyParser, ToolCallAfterReasoning) {
  const Split s = parse_every_way(
      "<|channel|>analysis<|message|>Need the weather.<|end|>"
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"location\": \"San Francisco\", \"unit\": \"c\"}<|call|>");
  EXPECT_EQ(s.reasoning, "Need the weather.");
  EXPECT_EQ(s.content, "");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, R"({"location":"San Francisco","unit":"c"})");
}

TEST(HarmonyParser, RecipientInTheRoleAndPreamble) {
  const Split s = parse_every_way(
      "<|channel|>commentary<|message|>Checking two cities.<|end|>"
      "<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\":1}"
      "<|call|>");
  EXPECT_EQ(s.content, "Checking two cities.");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "lookup");
  EXPECT_EQ(s.calls[0].arguments, R"({"q":1})");
}

TEST(HarmonyParser, SeveralMessagesOfOneKindAreSeparated) {
  const Split s = parse_every_way(
      "<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>analysis"
      "<|message|>two<|end|>\n<|start|>assistant<|channel|>final<|message|>answer");
  EXPECT_EQ(s.reasoning, "one\n\ntwo");
  EXPECT_EQ(s.content, "answer");  // cut off without <|return|>: what came is kept
}

TEST(HarmonyParser, TextWithoutHeaderIsContent) {
  const Split s = parse_every_way("plain words < and <| bars {\"a\": 1}");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "plain words < and <| bars {\"a\": 1}");
  // A structured-output answer (the grammar writes bare JSON) is content too.
  EXPECT_EQ(parse_every_way("{\"x\": [1, 2]}").content, "{\"x\": [1, 2]}");
}

TEST(HarmonyParser, MalformedCallIsContent) {
  const Split s = parse_every_way(
      "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": <|call|>");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "{\"a\": ");
  // A call cut off by max_tokens is not a call either.
  const Split cut =
      parse_every_way("<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\"");
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.content, "{\"a\"");
}

TEST(HarmonyParser, BuiltInToolInputIsContent) {
  const Split s = parse_every_way(
      "<|channel|>analysis<|message|>search<|end|><|start|>assistant<|channel|>commentary "
      "to=browser.search <|constrain|>json<|message|>{\"query\":\"x\"}<|call|>");
  EXPECT_EQ(s.reasoning, "search");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "{\"query\":\"x\"}");
}

TEST(HarmonyParser, StreamsBodyTextBeforeTheMessageEnds) {
  HarmonyParser p;
  auto a = p.feed("<|channel|>final<|message|>Hel");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].text, "Hel");
  auto b = p.feed("lo<|re");  // a possible <|return|> is held back
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].text, "lo");
  EXPECT_TRUE(p.feed("turn|>").empty());
  EXPECT_TRUE(p.finish().empty());
}

// Through the server's pipeline: the reasoning split, then the kHarmony tool parser.
TEST(HarmonyParser, ReasoningAndToolParsersTogether) {
  const std::string out =
      "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>commentary"
      "<|message|>Let me look.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
  for (std::size_t step : {out.size(), std::size_t{1}, std::size_t{7}}) {
    auto reasoning = ReasoningParser::for_format(ToolCallFormat::kHarmony, false);
    ToolCallParser tools(ToolCallFormat::kHarmony, {"get_weather"});
    std::string thought, content;
    std::vector<ParsedToolCall> calls;
    auto take = [&](const ReasoningSplit &s, bool last) {
      thought += s.reasoning;
      auto events = tools.feed(s.content);
      if (last) {
        auto rest = tools.finish();
        events.insert(events.end(), rest.begin(), rest.end());
      }
      for (auto &e : events)
        if (e.kind == ToolParseEvent::Kind::kCall)
          calls.push_back(e.call);
        else
          content += e.text;
    };
    for (std::size_t i = 0; i < out.size(); i += step)
      take(reasoning.feed(std::string_view(out).substr(i, step)), false);
    take(reasoning.finish(), true);
    EXPECT_EQ(thought, "Think.");
    EXPECT_EQ(content, "Let me look.");
    ASSERT_EQ(calls.size(), 1u) << "step " << step;
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(calls[0].arguments, R"({"city":"Paris"})");
  }
  // The forced-call grammar's text (no reasoning before it) parses the same way.
  const auto whole = parse_tool_calls(
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
      "\"Oslo\"}<|call|>",
      ToolCallFormat::kHarmony, {"get_weather"});
  ASSERT_EQ(whole.calls.size(), 1u);
  EXPECT_EQ(whole.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(whole.content, "");
  // Ended by the <|call|> end token, which the text may not show.
  const auto ended = parse_tool_calls(
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": 1}",
      ToolCallFormat::kHarmony, {"get_weather"});
  ASSERT_EQ(ended.calls.size(), 1u);
  EXPECT_EQ(ended.calls[0].arguments, R"({"city":1})");
}

TEST(HarmonyParser, DetectedFromTheVocabulary) {
  auto one_token = [](std::initializer_list<std::string_view> specials) {
    return [specials](std::string_view s) -> std::size_t {
      for (auto t : specials)
        if (t == s) return 1;
      return s.size();
    };
  };
  EXPECT_EQ(detect_tool_call_format(one_token({"<|channel|>", "<|constrain|>"})),
            ToolCallFormat::kHarmony);
  EXPECT_EQ(detect_tool_call_format(one_token({"<|channel|>"})), ToolCallFormat::kHermes);
}

}  // namespace
}  // namespace keel
