#include "text/reasoning_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace keel {
namespace {

ReasoningSplit split_all(const std::string &text, bool starts_inside = false) {
  ReasoningParser p(starts_inside);
  ReasoningSplit out = p.feed(text);
  ReasoningSplit tail = p.finish();
  out.reasoning += tail.reasoning;
  out.content += tail.content;
  return out;
}

// Feeds `text` in chunks cut at the given seed's random points.
ReasoningSplit split_chunked(const std::string &text, unsigned seed, bool starts_inside = false) {
  ReasoningParser p(starts_inside);
  std::mt19937 rng(seed);
  ReasoningSplit out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 4)(rng);
    const auto part = p.feed(std::string_view(text).substr(at, n));
    out.reasoning += part.reasoning;
    out.content += part.content;
    at += n;
  }
  const auto tail = p.finish();
  out.reasoning += tail.reasoning;
  out.content += tail.content;
  return out;
}

TEST(ReasoningParser, SplitsALeadingThinkBlockAndTrimsWhitespaceAroundMarkers) {
  const auto s = split_all("<think>\nLet me add 2 and 2.\n</think>\n\nIt is 4.");
  EXPECT_EQ(s.reasoning, "Let me add 2 and 2.");
  EXPECT_EQ(s.content, "It is 4.");
}

TEST(ReasoningParser, TextWithoutABlockIsAllContent) {
  const auto s = split_all("It is 4. <think>not reasoning</think>");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "It is 4. <think>not reasoning</think>");
}

TEST(ReasoningParser, APromptThatOpenedTheBlockMakesOutputReasoningUntilTheClose) {
  const auto s = split_all("first thoughts\n</think>\n\nanswer", true);
  EXPECT_EQ(s.reasoning, "first thoughts");
  EXPECT_EQ(s.content, "answer");
}

TEST(ReasoningParser, ABlockThatNeverClosesIsAllReasoning) {
  ReasoningParser p;
  auto a = p.feed("<think>still thinking ");
  EXPECT_TRUE(p.in_reasoning());
  auto b = p.finish();
  EXPECT_EQ(a.reasoning + b.reasoning, "still thinking");
  EXPECT_EQ(a.content + b.content, "");
  EXPECT_FALSE(p.closed());
}

TEST(ReasoningParser, HoldsBackAPartialMarkerOnly) {
  ReasoningParser p;
  EXPECT_EQ(p.feed("<thi").reasoning, "");
  auto r = p.feed("nk>abc</th");
  EXPECT_EQ(r.reasoning, "abc");
  EXPECT_EQ(r.content, "");
  r = p.feed("ink>xyz");
  EXPECT_TRUE(p.closed());
  EXPECT_EQ(r.content, "xyz");
}

TEST(ReasoningParser, AnOutputThatOnlyLooksLikeTheMarkerIsContentAtTheEnd) {
  const auto s = split_all("<thi");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "<thi");
}

TEST(ReasoningParser, AnyChunkingGivesTheSameSplit) {
  const std::string texts[] = {
      "<think>\nplan: a < b, and </th is not a close\n\n</think>\n\nanswer <think> stays",
      "  <think>x</think>y",
      "plain answer with </think> inside",
      "<think></think>",
      "<think>\n\n</think>\n\nonly answer",
  };
  for (const auto &t : texts) {
    const auto whole = split_all(t);
    for (unsigned seed = 0; seed < 50; ++seed) {
      const auto chunked = split_chunked(t, seed);
      EXPECT_EQ(chunked.reasoning, whole.reasoning) << t << " seed " << seed;
      EXPECT_EQ(chunked.content, whole.content) << t << " seed " << seed;
    }
  }
}

TEST(ReasoningParser, EmptyBlockGivesNoReasoning) {
  const auto s = split_all("<think>\n\n</think>\n\nonly answer");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "only answer");
}

TEST(PromptOpensReasoning, LooksAtTheLastMarkers) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_TRUE(prompt_opens_reasoning("<think>a</think> then <think>"));
}

}  // namespace
}  // namespace keel
