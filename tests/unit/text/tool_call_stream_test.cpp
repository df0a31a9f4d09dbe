// Streamed tool-call arguments: the canonical form built as the JSON arrives
// (JsonArgsStream) and the parser's start / fragments / end events, for every format
// and chunking.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "text/json_args_stream.h"
#include "text/reasoning_parser.h"
#include "text/tool_call_parser.h"

using namespace keel;
using json = nlohmann::ordered_json;

namespace {

const std::vector<std::string> kTools = {"get_weather", "search"};

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// One call as the stream shows it.
struct StreamedCall {
  std::string name, arguments;  // arguments: the fragments concatenated
  int fragments = 0;
  bool ended = false, complete = false;
  std::string end_arguments;
};

struct Streamed {
  std::string content;
  std::vector<StreamedCall> calls;
};

// Feeds `text` in chunks of 0..max_chunk bytes with streamed arguments; checks the
// events' order as it goes (start, fragments, end; nothing else inside a call).
Streamed stream(std::string_view text, ToolCallFormat f, std::mt19937 &rng,
                std::size_t max_chunk = 9, bool cut_short = false) {
  ToolCallParser p(f, kTools);
  p.set_stream_arguments(true);
  Streamed r;
  bool open = false;
  auto take = [&](const std::vector<ToolParseEvent> &evs) {
    for (const auto &e : evs) {
      switch (e.kind) {
        case ToolParseEvent::Kind::kText:
          EXPECT_FALSE(open) << "text inside a call";
          r.content += e.text;
          break;
        case ToolParseEvent::Kind::kCallStart:
          EXPECT_FALSE(open);
          open = true;
          {
            StreamedCall c;
            c.name = e.call.name;
            r.calls.push_back(c);
          }
          break;
        case ToolParseEvent::Kind::kCallArgs:
          EXPECT_TRUE(open);
          EXPECT_FALSE(e.text.empty());
          if (!open) break;
          r.calls.back().arguments += e.text;
          ++r.calls.back().fragments;
          break;
        case ToolParseEvent::Kind::kCallEnd:
          EXPECT_TRUE(open);
          if (!open) break;
          open = false;
          r.calls.back().ended = true;
          r.calls.back().complete = e.complete;
          r.calls.back().end_arguments = e.call.arguments;
          EXPECT_EQ(e.call.name, r.calls.back().name);
          break;
        case ToolParseEvent::Kind::kCall:
          ADD_FAILURE() << "a whole call while streaming arguments";
          break;
      }
    }
  };
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(0, max_chunk)(rng);
    take(p.feed(text.substr(i, n)));
    i += n;
  }
  take(p.finish(cut_short));
  EXPECT_FALSE(open) << "a call left open";
  for (const auto &c : r.calls) EXPECT_EQ(c.arguments, c.end_arguments);
  return r;
}

std::string canonical(std::string_view text, std::mt19937 &rng, std::size_t *taken = nullptr) {
  JsonArgsStream s;
  std::string out;
  std::size_t i = 0, t = 0;
  while (i < text.size() && !s.done()) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 4)(rng);
    const std::string_view piece = text.substr(i, n);
    t += s.feed(piece);
    out += s.take_new();
    i += piece.size();
  }
  if (taken) *taken = t;
  EXPECT_EQ(out, s.output());
  return out;
}

}  // namespace

TEST(JsonArgsStream, BuildsTheDumpOfTheParsedValueForAnyChunking) {
  const std::vector<std::string> texts = {
      R"({})",
      R"( { "city" : "Paris" , "unit":"c" } )",
      R"({"a": [1, -2, 3.50, 1E2, -0, 0.1e-3, 12345678901234567890], "b": {"c": [true, false, null, []]}})",
      R"({"s": "tab\there \"q\" back\\slash \/ \b\f\r\n \u0041\u00e9\u20ac \ud83d\ude00 \u0001 \u007f"})",
      R"({"raw": "h\u00e9llo wörld 😀", "e": ""})",
      R"({"deep": [[[[{"x": [[]]}]]]], "n": 5})",
  };
  std::mt19937 rng(3);
  for (const auto &t : texts) {
    const std::string want = dump(json::parse(t));
    for (int trial = 0; trial < 50; ++trial) EXPECT_EQ(canonical(t, rng), want) << t;
  }
}

TEST(JsonArgsStream, StopsAtTheEndOfTheValue) {
  std::mt19937 rng(4);
  std::size_t taken = 0;
  EXPECT_EQ(canonical(R"({"a": {"b": 1}}} </tool_call>)", rng, &taken), R"({"a":{"b":1}})");
  EXPECT_EQ(taken, 15u);
  JsonArgsStream s;
  EXPECT_EQ(s.feed(R"({"n": 12)"), 8u);
  EXPECT_EQ(s.take_new(), R"({"n":)");  // the number waits for the byte after it
  EXPECT_EQ(s.feed("}x"), 1u);
  EXPECT_TRUE(s.done());
  EXPECT_EQ(s.take_new(), "12}");
}

TEST(ToolCallStream, EachFormatStreamsTheArgumentsItCanAndAgreesWithTheWholeParse) {
  const std::string long_args =
      R"({"city": "Paris", "notes": "a long enough argument string to come in many pieces", "days": [1, 2, 3]})";
  struct Case {
    ToolCallFormat f;
    std::string text;
    bool streamed;  // the arguments come as they are written (else all at once)
  };
  const std::vector<Case> cases = {
      {ToolCallFormat::kHermes,
       "Let me see.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + long_args +
           "}\n</tool_call>\n<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": "
           "\"</tool_call>\"}}</tool_call>",
       true},
      {ToolCallFormat::kLlama3Json, R"({"name": "get_weather", "parameters": )" + long_args + "}",
       true},
      {ToolCallFormat::kLlama3Json,
       R"(<|python_tag|>{"name": "anything", "parameters": )" + long_args + "}", true},
      {ToolCallFormat::kMistral, "[TOOL_CALLS]get_weather[ARGS]" + long_args, true},
      {ToolCallFormat::kHarmony,
       "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + long_args +
           "<|call|>",
       true},
      // Keys in another order, or the arguments as a string: whole.
      {ToolCallFormat::kHermes,
       "<tool_call>{\"arguments\": " + long_args + ", \"name\": \"get_weather\"}</tool_call>",
       false},
      {ToolCallFormat::kHermes,
       "<tool_call>{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": "
       "\\\"rain\\\"}\"}</tool_call>",
       false},
      {ToolCallFormat::kMistral,
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " + long_args + "}]", false},
  };
  std::mt19937 rng(11);
  for (const auto &c : cases) {
    const auto want = parse_tool_calls(c.text, c.f, kTools);
    ASSERT_FALSE(want.calls.empty()) << c.text;
    for (int trial = 0; trial < 100; ++trial) {
      const auto got = stream(c.text, c.f, rng, trial % 2 ? 3 : 9);
      EXPECT_EQ(got.content, want.content) << c.text;
      ASSERT_EQ(got.calls.size(), want.calls.size()) << c.text;
      for (std::size_t k = 0; k < got.calls.size(); ++k) {
        EXPECT_EQ(got.calls[k].name, want.calls[k].name);
        EXPECT_EQ(got.calls[k].arguments, want.calls[k].arguments);
        EXPECT_TRUE(got.calls[k].complete);
      }
      // Fed a few bytes at a time, the long arguments come in many fragments.
      if (trial % 2) {
        EXPECT_EQ(got.calls[0].fragments > 5, c.streamed) << c.text;
      }
    }
  }
}

TEST(ToolCallStream, AStartedCallThatFailsEndsIncompleteAndItsTextIsDropped) {
  std::mt19937 rng(5);
  // Cut short by max_tokens: the call stays, with what was streamed; finish says length.
  const std::string cut =
      "Hi <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa";
  auto r = stream(cut, ToolCallFormat::kHermes, rng, 9, true);
  EXPECT_EQ(r.content, "Hi");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_FALSE(r.calls[0].complete);
  EXPECT_EQ(r.calls[0].arguments, "{\"city\":\"Pa");
  // Malformed: the same; text after the call is content again.
  r = stream("<tool_call>{\"name\": \"search\", \"arguments\": {]}</tool_call> after",
             ToolCallFormat::kHermes, rng);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_FALSE(r.calls[0].complete);
  EXPECT_EQ(r.content, "after");
  // Not streamed before it failed (no head yet): content, as in the whole parse.
  const std::string early = "Hi <tool_call>{\"name\": \"get_weather\"";
  r = stream(early, ToolCallFormat::kHermes, rng, 9, true);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, early);
  // An unmarked Llama object naming an undeclared tool is content, never started.
  const std::string answer = R"({"name": "Bob", "parameters": {"age": 3}})";
  r = stream(answer, ToolCallFormat::kLlama3Json, rng);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, answer);
}

// Random texts of the formats' pieces: the streamed events are well formed and the same
// for every chunking; where every call completed, they say what the whole parse says.
TEST(ToolCallStream, RandomPiecesAgreeAcrossChunkings) {
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
                                           " ",
                                           "x",
                                           "1",
                                           "\"name\": \"search\", \"arguments\": ",
                                           "{\"name\": \"get_weather\", \"arguments\": {",
                                           "search"};
  std::mt19937 rng(99);
  int started = 0;
  for (int n = 0; n < 2000; ++n) {
    std::string text;
    const int len = std::uniform_int_distribution<int>(0, 14)(rng);
    for (int k = 0; k < len; ++k)
      text += pieces[std::uniform_int_distribution<std::size_t>(0, pieces.size() - 1)(rng)];
    for (auto f :
         {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
      const auto a = stream(text, f, rng, 1);
      const auto b = stream(text, f, rng, 12);
      EXPECT_EQ(a.content, b.content) << text;
      ASSERT_EQ(a.calls.size(), b.calls.size()) << text;
      bool all_complete = true;
      for (std::size_t k = 0; k < a.calls.size(); ++k) {
        EXPECT_EQ(a.calls[k].name, b.calls[k].name) << text;
        EXPECT_EQ(a.calls[k].arguments, b.calls[k].arguments) << text;
        EXPECT_EQ(a.calls[k].complete, b.calls[k].complete) << text;
        if (a.calls[k].complete) {
          EXPECT_TRUE(json::accept(a.calls[k].arguments)) << text;
        }
        all_complete = all_complete && a.calls[k].complete;
      }
      started += !a.calls.empty();
      if (!all_complete) continue;
      const auto want = parse_tool_calls(text, f, kTools);
      EXPECT_EQ(a.content, want.content) << text;
      ASSERT_EQ(a.calls.size(), want.calls.size()) << text;
      for (std::size_t k = 0; k < a.calls.size(); ++k)
        EXPECT_EQ(a.calls[k].name, want.calls[k].name) << text;
    }
  }
  EXPECT_GT(started, 50);
}

// gpt-oss: the harmony split passes a call's body on as it comes (stream_calls), so the
// kHarmony parser streams its arguments; the result is the unstreamed one.
TEST(ToolCallStream, HarmonyCallsStreamThroughTheChannelSplit) {
  const std::string text =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", "
      "\"notes\": \"a long enough argument string to come in many pieces\"}<|call|>";
  auto whole = ReasoningParser::for_format(ToolCallFormat::kHarmony, false);
  ReasoningSplit w = whole.feed(text);
  const ReasoningSplit wr = whole.finish();
  const auto want = parse_tool_calls(w.content + wr.content, ToolCallFormat::kHarmony, kTools);
  ASSERT_EQ(want.calls.size(), 1u);
  std::mt19937 rng(8);
  for (int trial = 0; trial < 100; ++trial) {
    auto reasoning = ReasoningParser::for_format(ToolCallFormat::kHarmony, false);
    reasoning.set_stream_calls(true);
    ToolCallParser calls(ToolCallFormat::kHarmony, kTools);
    calls.set_stream_arguments(true);
    std::string reasoning_text, args;
    int fragments = 0, ends = 0;
    auto take = [&](const ReasoningSplit &s, bool final) {
      reasoning_text += s.reasoning;
      auto evs = calls.feed(s.content);
      if (final) {
        auto rest = calls.finish();
        evs.insert(evs.end(), rest.begin(), rest.end());
      }
      for (const auto &e : evs) {
        if (e.kind == ToolParseEvent::Kind::kCallArgs) {
          args += e.text;
          ++fragments;
        } else if (e.kind == ToolParseEvent::Kind::kCallEnd) {
          ++ends;
          EXPECT_TRUE(e.complete);
          EXPECT_EQ(e.call.name, "get_weather");
          EXPECT_EQ(e.call.arguments, want.calls[0].arguments);
        } else {
          EXPECT_NE(e.kind, ToolParseEvent::Kind::kText) << e.text;
        }
      }
    };
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 4)(rng);
      take(reasoning.feed(std::string_view(text).substr(i, n)), false);
      i += n;
    }
    take(reasoning.finish(), true);
    EXPECT_EQ(reasoning_text, w.reasoning + wr.reasoning);
    EXPECT_EQ(ends, 1);
    EXPECT_EQ(args, want.calls[0].arguments);
    EXPECT_GT(fragments, 5);
  }
}
