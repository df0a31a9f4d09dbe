// Regex, choice and GBNF front ends, and the matcher's byte-level behaviour.
#include <gtest/gtest.h>

#include <chrono>

#include "grammar/utf8_ranges.h"
#include "grammar_test_util.h"

namespace keel::grammar::test {
namespace {

using K = ConstraintKind;

TEST(Regex, LiteralsClassesAndQuantifiers) {
  auto g = compile(K::kRegex, R"(^[a-c]+x{2,3}\d?$)");
  EXPECT_TRUE(matches(g, "abxx"));
  EXPECT_TRUE(matches(g, "cxxx7"));
  EXPECT_FALSE(matches(g, "xx"));     // needs one of [a-c]
  EXPECT_FALSE(matches(g, "axxxx"));  // at most three x
  EXPECT_FALSE(matches(g, "ax"));     // incomplete...
  EXPECT_TRUE(prefix_ok(g, "ax"));    // ...but a valid prefix
  EXPECT_FALSE(prefix_ok(g, "ad"));
}

TEST(Regex, AlternationGroupsDotAndEscapes) {
  auto g = compile(K::kRegex, R"((?:cat|dog)s?\.[^\s]\\)");
  EXPECT_TRUE(matches(g, "cats.!\\"));
  EXPECT_TRUE(matches(g, "dog.\xc3\xa9\\"));  // [^\s] takes a two-byte character
  EXPECT_FALSE(matches(g, "dog. \\"));
  EXPECT_FALSE(matches(g, "cow.x\\"));
  auto dot = compile(K::kRegex, "a.b");
  EXPECT_TRUE(matches(dot,
                      "a\xe2\x82\xac"
                      "b"));  // U+20AC is one character
  EXPECT_FALSE(matches(dot, "a\nb"));
  EXPECT_FALSE(prefix_ok(dot, "a\xff"));  // never invalid UTF-8
}

TEST(Regex, UnicodeRangesEncodeEveryScalar) {
  // Every sequence decodes to a scalar inside the range and the sequences cover it.
  auto seqs = utf8_sequences({{0x7F, 0x10FFFF}}, false);
  std::size_t covered = 0;
  for (const auto &s : seqs) {
    std::size_t n = 1;
    for (std::size_t i = 0; i < s.len; ++i) n *= s.hi[i] - s.lo[i] + 1;
    covered += n;
  }
  EXPECT_EQ(covered, 0x10FFFF - 0x7F + 1 - 0x800);  // minus the surrogates
  auto g = compile(K::kRegex, "[\\u00e9-\\u00ff]");
  EXPECT_TRUE(matches(g, "\xc3\xa9"));
  EXPECT_FALSE(matches(g, "\xc3\xa8"));
}

TEST(Regex, UnsupportedFeaturesAreNamedErrors) {
  EXPECT_NE(compile_error(K::kRegex, "(?=a)b").find("lookaround"), std::string::npos);
  EXPECT_NE(compile_error(K::kRegex, "(a)\\1").find("backreference"), std::string::npos);
  EXPECT_NE(compile_error(K::kRegex, "a{5000}").find("over 1000"), std::string::npos);
  EXPECT_NE(compile_error(K::kRegex, "(ab").find("missing ')'"), std::string::npos);
  EXPECT_NE(
      compile_error(K::kRegex, "[a-", "structured_outputs.regex").find("structured_outputs.regex"),
      std::string::npos);
}

TEST(Regex, HostilePatternsCompileFastOrAreRefused) {
  auto t0 = std::chrono::steady_clock::now();
  // Exponential for a backtracking engine; linear for an automaton.
  auto g = compile(K::kRegex, "(a+)+(b|a+)*c");
  std::string as(2000, 'a');
  EXPECT_TRUE(prefix_ok(g, as));
  EXPECT_TRUE(matches(g, as + "c"));
  // Nested counted repeats would multiply states; as rules of blocks they stay small
  // and exact: a{1000000000} is built, and a 1,000-character prefix is no match yet.
  auto nested = compile(K::kRegex, "((a{1000}){1000}){1000}");
  EXPECT_TRUE(prefix_ok(nested, std::string(1000, 'a')));
  EXPECT_FALSE(matches(nested, std::string(1000, 'a')));
  EXPECT_FALSE(prefix_ok(nested, "ab"));
  EXPECT_NE(compile_error(K::kRegex, std::string(500, '(') + "a" + std::string(500, ')')), "");
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 5.0);
}

TEST(Choice, OneOfTheStrings) {
  auto g = compile(K::kChoice, R"(["yes", "no", "yesterday"])");
  EXPECT_TRUE(matches(g, "yes"));
  EXPECT_TRUE(matches(g, "yesterday"));
  EXPECT_TRUE(matches(g, "no"));
  EXPECT_FALSE(matches(g, "ye"));
  EXPECT_FALSE(matches(g, "nope"));
  EXPECT_NE(compile_error(K::kChoice, R"(["a", 3])").find("choice.1"), std::string::npos);
  EXPECT_NE(compile_error(K::kChoice, "[]"), "");
}

TEST(Choice, HugeEnumStaysSmall) {
  std::string text = "[";
  for (int i = 0; i < 20000; ++i) text += (i ? ",\"item" : "\"item") + std::to_string(i) + "\"";
  text += "]";
  auto t0 = std::chrono::steady_clock::now();
  auto g = compile(K::kChoice, text);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 2.0);
  EXPECT_TRUE(matches(g, "item19999"));
  EXPECT_FALSE(matches(g, "item20000"));
  EXPECT_LT(g->grammar().num_nodes(), 40000u);
}

TEST(Gbnf, LlamaCppJsonGrammar) {
  // The shape of llama.cpp's grammars/json.gbnf: multi-line rules, groups, comments.
  const char *text = R"(# a JSON value
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";
  auto g = compile(K::kGrammar, text);
  EXPECT_TRUE(matches(g, R"({"a": [1, 2.5, "x\n"], "b": {"c": null}})"));
  EXPECT_TRUE(matches(g, "{}"));
  EXPECT_FALSE(matches(g, R"({"a" 1})"));
  EXPECT_FALSE(matches(g, "[1]"));  // root is an object
}

TEST(Gbnf, ErrorsNameLineAndRule) {
  EXPECT_NE(compile_error(K::kGrammar, "root ::= foo").find("'foo'"), std::string::npos);
  EXPECT_NE(compile_error(K::kGrammar, "start ::= \"a\"").find("root"), std::string::npos);
  EXPECT_NE(compile_error(K::kGrammar, "root ::= \"a\"\nx ::= [b-").find("line 2"),
            std::string::npos);
  // Left recursion would grow the stack forever: refused, naming the rule.
  EXPECT_NE(compile_error(K::kGrammar, "root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"")
                .find("left recursion in rule 'expr'"),
            std::string::npos);
  EXPECT_NE(compile_error(K::kGrammar, "root ::= a\na ::= b \"x\"\nb ::= \"\" | a")
                .find("left recursion"),
            std::string::npos);
  // A rule that can never finish.
  EXPECT_NE(compile_error(K::kGrammar, "root ::= \"a\" root").find("never complete"),
            std::string::npos);
}

TEST(Gbnf, RightRecursionAndNullableRules) {
  auto g =
      compile(K::kGrammar, "root ::= \"(\" inner \")\"\ninner ::= \"\" | \"(\" inner \")\" inner");
  EXPECT_TRUE(matches(g, "()"));
  EXPECT_TRUE(matches(g, "(()(()))"));
  EXPECT_FALSE(matches(g, "(()"));
  EXPECT_TRUE(prefix_ok(g, "(((((("));
  EXPECT_FALSE(matches(g, "())"));
}

TEST(Matcher, RollbackRestoresEarlierStates) {
  auto g = compile(K::kRegex, "ab(c|d)e");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_bytes("ab"));
  ASSERT_TRUE(m.accept_bytes("c"));
  EXPECT_FALSE(m.accept_bytes("x"));  // rejected: state unchanged
  ASSERT_TRUE(m.accept_bytes("e"));
  EXPECT_TRUE(m.is_complete());
  m.rollback(2);  // back to after "ab"
  EXPECT_FALSE(m.is_complete());
  EXPECT_TRUE(m.accept_bytes("de"));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.can_continue());
  m.rollback(100);
  EXPECT_TRUE(m.accept_bytes("abce"));
}

}  // namespace
}  // namespace keel::grammar::test
