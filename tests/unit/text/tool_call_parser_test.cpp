// Tool calls in generated text: each format, malformed markup kept as content, and the
// incremental parser giving the whole-text result for every chunking.
#include "text/tool_call_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

using namespace keel;
using json = nlohmann::ordered_json;

namespace {

const std::vector<std::string> kTools = {"get_weather", "search"};

ToolParseResult whole(std::string_view text, ToolCallFormat f) {
  return parse_tool_calls(text, f, kTools);
}

// Feeds `text` in random chunks; returns the merged result and every text event.
ToolParseResult chunked(std::string_view text, ToolCallFormat f, std::mt19937 &rng,
                        std::vector<std::string> *text_events = nullptr) {
  ToolCallParser p(f, kTools);
  ToolParseResult r;
  auto take = [&](std::vector<ToolParseEvent> evs) {
    for (auto &e : evs) {
      if (e.kind == ToolParseEvent::Kind::kText) {
        EXPECT_FALSE(e.text.empty());
        r.content += e.text;
        if (text_events) text_events->push_back(e.text);
      } else {
        r.calls.push_back(e.call);
      }
    }
  };
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(0, 9)(rng);
    take(p.feed(text.substr(i, n)));
    i += n;
  }
  take(p.finish());
  return r;
}

void expect_same(const ToolParseResult &a, const ToolParseResult &b, const std::string &what) {
  EXPECT_EQ(a.content, b.content) << what;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << what;
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << what;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << what;
  }
}

}  // namespace

TEST(ToolCallParser, HermesCallsBetweenContent) {
  const auto r = whole(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"days\": [1, 2]}}\n</tool_call>\n<tool_call>{\"name\": \"search\", "
      "\"arguments\": {\"q\": \"a \\\"b\\\" c\"}}</tool_call>",
      ToolCallFormat::kHermes);
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(r.calls[0].arguments), json::parse(R"({"city":"Paris","days":[1,2]})"));
  // Key order is the model's.
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Paris","days":[1,2]})");
  EXPECT_EQ(r.calls[1].name, "search");
}

TEST(ToolCallParser, HermesCloseTagInsideAJsonStringDoesNotEndTheCall) {
  const std::string text =
      "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"</tool_call>\"}}</tool_call>";
  const auto r = whole(text, ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"q":"</tool_call>"})");
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallParser, HermesStringArgumentsAndMissingArguments) {
  auto r = whole(R"(<tool_call>{"name": "search", "arguments": "{\"q\": 1}"}</tool_call>)",
                 ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"q":1})");
  r = whole(R"(<tool_call>{"name": "now"}</tool_call>)", ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "now");  // marked calls need not name a declared tool
  EXPECT_EQ(r.calls[0].arguments, "{}");
}

TEST(ToolCallParser, MalformedHermesStaysContent) {
  for (const std::string &text : {
           std::string("<tool_call>{\"name\": \"x\", \"arguments\": {</tool_call> after"),
           std::string("<tool_call>not json</tool_call>"),
           std::string("<tool_call>{\"arguments\": {}}</tool_call>"),
           std::string("<tool_call>{\"name\": 5}</tool_call>"),
           std::string("<tool_call>{\"name\": \"x\", \"arguments\": [1]}</tool_call>"),
           std::string("<tool_call>{\"name\": \"x\", \"arguments\": \"[1]\"}</tool_call>"),
           std::string("<tool_call>{\"name\": \"x\"} trailing</tool_call>"),
           std::string("<tool_call>{\"name\": \"x\", \"arguments\": {\"a\": 1}"),  // cut short
           std::string("a <tool_cal"),
           std::string("<tools> and <tool_call"),
       }) {
    const auto r = whole(text, ToolCallFormat::kHermes);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text) << text;
  }
}

TEST(ToolCallParser, UnclosedHermesCallWithWholeJsonCounts) {
  const auto r = whole("<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n",
                       ToolCallFormat::kHermes);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallParser, DeepNestingIsContentNotACrash) {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  for (auto f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    const std::string body = "{\"name\": \"search\", \"arguments\": {\"a\": " + deep + "}}";
    const std::string text = f == ToolCallFormat::kHermes    ? "<tool_call>" + body + "</tool_call>"
                             : f == ToolCallFormat::kMistral ? "[TOOL_CALLS][" + body + "]"
                                                             : body;
    const auto r = whole(text, f);
    EXPECT_TRUE(r.calls.empty()) << tool_call_format_name(f);
    EXPECT_EQ(r.content, text);
  }
}

TEST(ToolCallParser, Llama3JsonNeedsADeclaredToolUnlessTagged) {
  auto r = whole(" {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
                 ToolCallFormat::kLlama3Json);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(r.content, "");
  r = whole(R"({"name": "a", "parameters": {}}; {"name": "search", "parameters": {"q": 2}})",
            ToolCallFormat::kLlama3Json);
  EXPECT_TRUE(r.calls.empty());  // "a" is not a declared tool
  r = whole(R"({"name": "search", "parameters": {}}; {"name": "get_weather", "parameters": {}})",
            ToolCallFormat::kLlama3Json);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[1].name, "get_weather");
  r = whole("<|python_tag|>{\"name\": \"brave_search\", \"parameters\": {\"query\": \"x\"}}",
            ToolCallFormat::kLlama3Json);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "brave_search");
  // JSON that is not a call, and text, stay content byte for byte.
  for (const std::string &text : {std::string(" {\"answer\": 42}\n"), std::string("Sure: {}"),
                                  std::string("{\"name\": \"search\", \"parameters\": {}"),
                                  std::string("\n\n"), std::string("")}) {
    r = whole(text, ToolCallFormat::kLlama3Json);
    EXPECT_TRUE(r.calls.empty()) << text;
    EXPECT_EQ(r.content, text) << text;
  }
}

TEST(ToolCallParser, MistralMarkedArrayBareArrayAndV11) {
  auto r = whole(
      "Checking. [TOOL_CALLS][{\"name\": \"anything\", \"arguments\": {\"a\": 1}}, {\"name\": "
      "\"search\", \"arguments\": {}}]",
      ToolCallFormat::kMistral);
  EXPECT_EQ(r.content, "Checking.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "anything");
  r = whole("[{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}]", ToolCallFormat::kMistral);
  ASSERT_EQ(r.calls.size(), 1u);
  r = whole("[{\"name\": \"nope\", \"arguments\": {}}]", ToolCallFormat::kMistral);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "[{\"name\": \"nope\", \"arguments\": {}}]");
  r = whole("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}[TOOL_CALLS]search{\"q\": 1}",
            ToolCallFormat::kMistral);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(r.calls[1].arguments, R"({"q":1})");
  r = whole("[TOOL_CALLS][{\"name\": 1}] tail", ToolCallFormat::kMistral);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "[TOOL_CALLS][{\"name\": 1}] tail");
}

TEST(ToolCallParser, NoneFormatPassesEverythingThrough) {
  const std::string text = "<tool_call>{\"name\": \"search\"}</tool_call>";
  const auto r = whole(text, ToolCallFormat::kNone);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
}

TEST(ToolCallParser, EveryChunkingGivesTheWholeTextResult) {
  const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
      {ToolCallFormat::kHermes,
       "Let me see.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"P{aris}\\\"\"}}\n</tool_call>\n<tool_call>{\"name\": \"search\"}</tool_call>\nDone."},
      {ToolCallFormat::kHermes, "a < b <tool <tool_call>{bad}</tool_call> c <tool_call"},
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"s\", \"arguments\": {\"q\": \"</tool_call>\"}} </tool_call>x"},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"s\"} junk</tool_call> <tool_call>{"},
      {ToolCallFormat::kHermes, "<think>\nhmm\n</think>\n\n<tool_call>{\"name\": \"x\"}"},
      {ToolCallFormat::kHermes, "  plain text with trailing space  "},
      {ToolCallFormat::kLlama3Json,
       "\n{\"name\": \"search\", \"parameters\": {\"q\": \"}{\"}} ; {\"name\": \"get_weather\", "
       "\"arguments\": {}}"},
      {ToolCallFormat::kLlama3Json, "<|python_tag|>{\"name\": \"x\", \"parameters\": {}}"},
      {ToolCallFormat::kLlama3Json, "<|pyt not a tag {\"name\": \"search\"}"},
      {ToolCallFormat::kLlama3Json, "{\"city\": \"Paris\"} is the answer"},
      {ToolCallFormat::kMistral,
       "Ok [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": 2}]}}] then"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]search[ARGS]{\"q\": \"[ARGS]\"}"},
      {ToolCallFormat::kMistral, "[TOOL_CALL] [TOOL_CALLS]oops"},
  };
  std::mt19937 rng(1234);
  for (const auto &[f, text] : cases) {
    const auto want = whole(text, f);
    for (int trial = 0; trial < 300; ++trial)
      expect_same(chunked(text, f, rng), want, tool_call_format_name(f) + (": " + text));
  }
}

TEST(ToolCallParser, StreamedContentNeverShowsCallMarkup) {
  const std::string text =
      "Hi <tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"<b>\"}}</tool_call>";
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::string> texts;
    const auto r = chunked(text, ToolCallFormat::kHermes, rng, &texts);
    ASSERT_EQ(r.calls.size(), 1u);
    for (const auto &t : texts) EXPECT_EQ(t.find('<'), std::string::npos) << t;
    EXPECT_EQ(r.content, "Hi");
  }
}

TEST(ToolCallParser, DetectsTheFormatFromTheVocabulary) {
  auto with = [](std::vector<std::string> single) {
    return detect_tool_call_format([single](std::string_view s) -> std::size_t {
      for (const auto &t : single)
        if (s == t) return 1;
      return s.size();
    });
  };
  EXPECT_EQ(with({"<tool_call>", "<|python_tag|>"}), ToolCallFormat::kHermes);
  EXPECT_EQ(with({"[TOOL_CALLS]"}), ToolCallFormat::kMistral);
  EXPECT_EQ(with({"<|python_tag|>"}), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(with({}), ToolCallFormat::kHermes);
}

TEST(ToolCallParser, JsonValueEnd) {
  bool deep = false;
  EXPECT_EQ(json_value_end(R"({"a": "}\"]"} x)", 8, &deep), 13u);
  EXPECT_EQ(json_value_end(R"([1, {"a": [2]}])", 8, &deep), 15u);
  EXPECT_EQ(json_value_end(R"({"a": [)", 8, &deep), std::string_view::npos);
  EXPECT_FALSE(deep);
  json_value_end("[[[[", 3, &deep);
  EXPECT_TRUE(deep);
}

// Random texts made of the formats' pieces: never a crash, and every chunking agrees
// with the whole-text parse, in every format.
TEST(ToolCallParser, RandomPiecesAgreeAcrossChunkings) {
  const std::vector<std::string> pieces = {"<tool_call>",
                                           "</tool_call>",
                                           "[TOOL_CALLS]",
                                           "<|python_tag|>",
                                           "[ARGS]",
                                           "{",
                                           "}",
                                           "[",
                                           "]",
                                           "\"",
                                           "\\",
                                           ":",
                                           ",",
                                           ";",
                                           " ",
                                           "\n",
                                           "x",
                                           "<",
                                           "\"name\": \"search\"",
                                           "\"arguments\": ",
                                           "\"parameters\": ",
                                           "{\"name\": \"get_weather\", \"arguments\": {}}",
                                           "search"};
  std::mt19937 rng(99);
  int with_calls = 0;
  for (int n = 0; n < 3000; ++n) {
    std::string text;
    const int len = std::uniform_int_distribution<int>(0, 14)(rng);
    for (int k = 0; k < len; ++k)
      text += pieces[std::uniform_int_distribution<std::size_t>(0, pieces.size() - 1)(rng)];
    for (auto f :
         {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
      const auto want = whole(text, f);
      with_calls += !want.calls.empty();
      for (const auto &c : want.calls) EXPECT_TRUE(json::accept(c.arguments)) << text;
      if (want.calls.empty()) EXPECT_EQ(want.content, text) << tool_call_format_name(f);
      expect_same(chunked(text, f, rng), want, tool_call_format_name(f) + (": " + text));
    }
  }
  EXPECT_GT(with_calls, 50);  // the generator does produce calls
}
