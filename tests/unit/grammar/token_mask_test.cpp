// Token masks: the mask equals brute force (try every token, roll back) on a small
// hand-made vocabulary and on real ones; EOS only when complete; applying a mask.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "grammar_test_util.h"
#include "vocab_fixtures.h"

namespace keel::grammar::test {
namespace {

using K = ConstraintKind;

std::shared_ptr<const TokenVocab> tiny_vocab() {
  // id 0 is EOS, id 1 a special token (no bytes), the rest text.
  std::vector<std::string> b = {"",    "",   "{",    "}",    "\"", "a",    "ab",  "\"a",
                                "\":", ",",  " ",    "1",    "12", "}\n",  "\"}", "\",\"",
                                "x\"", "ok", "\xc3", "\xa9", "é",  "null", "nu",  "ll",
                                "[",   "]",  "],",   "}]",   "\"b"};
  return std::make_shared<const TokenVocab>(b, std::vector<TokenId>{0}, std::vector<TokenId>{1});
}

// Every token's verdict by trying it on a copy of the matcher's history.
std::vector<char> brute_force(GrammarMatcher &m, std::size_t vocab) {
  std::vector<char> ok(vocab, 0);
  for (std::size_t id = 0; id < vocab; ++id) {
    if (m.accept_token(TokenId(id))) {
      ok[id] = 1;
      m.rollback(1);
    }
  }
  return ok;
}

void expect_mask_matches_brute_force(GrammarMatcher &m, const std::string &context) {
  TokenBitmask mask;
  m.fill_next_token_bitmask(mask);
  auto ok = brute_force(m, m.compiled().vocab()->size());
  for (std::size_t id = 0; id < ok.size(); ++id)
    ASSERT_EQ(mask.test(TokenId(id)), bool(ok[id]))
        << "token " << id << " '" << m.compiled().vocab()->bytes(TokenId(id)) << "' after "
        << context;
}

TEST(TokenMask, EqualsBruteForceOnATinyVocabulary) {
  auto vocab = tiny_vocab();
  GrammarCache cache(vocab);
  auto g = cache.get({K::kJsonSchema, R"({"type": "object", "properties": {"a": {"type": "string"},
      "b": {"type": "array", "items": {"type": "integer"}}}, "required": ["a"]})"});
  GrammarMatcher m(g);
  // Walk a document token by token, checking the mask at every step.
  // {"a":"ééab"}, with the second é split into its two bytes.
  const std::vector<TokenId> doc = {2, 7, 8, 4, 20, 18, 19, 6, 4, 3};
  std::string so_far;
  for (TokenId t : doc) {
    expect_mask_matches_brute_force(m, so_far);
    ASSERT_TRUE(m.accept_token(t)) << so_far << " + " << vocab->bytes(t);
    so_far += vocab->bytes(t);
  }
  EXPECT_TRUE(m.is_complete());
  expect_mask_matches_brute_force(m, so_far);
  TokenBitmask mask;
  m.fill_next_token_bitmask(mask);
  EXPECT_TRUE(mask.test(0));  // EOS now
  EXPECT_FALSE(mask.test(1));
  EXPECT_TRUE(m.accept_token(0));
  EXPECT_TRUE(m.is_terminated());
  m.fill_next_token_bitmask(mask);
  EXPECT_EQ(mask.count(), 0u);
}

TEST(TokenMask, EosOnlyWhenComplete) {
  GrammarCache cache(tiny_vocab());
  GrammarMatcher m(cache.get({K::kRegex, "ab(ab)?"}));
  TokenBitmask mask;
  m.fill_next_token_bitmask(mask);
  EXPECT_FALSE(mask.test(0));
  EXPECT_FALSE(m.accept_token(0));
  EXPECT_TRUE(mask.test(5) && mask.test(6));  // "a", "ab"
  ASSERT_TRUE(m.accept_token(6));
  m.fill_next_token_bitmask(mask);
  EXPECT_TRUE(mask.test(0));
  EXPECT_TRUE(mask.test(6));
  EXPECT_FALSE(mask.test(17));
}

TEST(TokenMask, ApplyToLogits) {
  TokenBitmask mask(70);
  mask.set(3);
  mask.set(64);
  std::vector<float> logits(72, 1.0f);
  apply_token_bitmask(logits, mask);
  for (std::size_t i = 0; i < logits.size(); ++i)
    EXPECT_EQ(std::isinf(logits[i]), i != 3 && i != 64) << i;  // 70, 71: past the mask
  mask.set_all();
  EXPECT_EQ(mask.count(), 70u);
}

TEST(TokenMask, CacheSharesCompiledGrammarsByText) {
  GrammarCache cache(tiny_vocab(), 2);
  auto a = cache.get({K::kRegex, "a+"});
  EXPECT_EQ(a, cache.get({K::kRegex, "a+"}));
  EXPECT_NE(a, cache.get({K::kChoice, R"(["ab"])"}));
  // '+' is in no token of this vocabulary: refused when compiled (grammar/dead_ends.h).
  EXPECT_THROW(cache.get({K::kChoice, R"(["a+"])"}), Error);
  cache.get({K::kRegex, "b"});
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_THROW(cache.get({K::kRegex, "(("}, "structured_outputs.regex"), Error);
}

TEST(TokenMask, DefaultModelVocabularyEqualsBruteForce) {
  auto vocab = default_model_vocab();
  GrammarCache cache(vocab);
  auto g = cache.get({K::kJsonSchema, R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12}, "n": {"type": "integer", "minimum": 0, "maximum": 500},
      "tags": {"type": "array", "items": {"enum": ["red", "green"]}, "maxItems": 2}},
      "required": ["name", "n", "tags"], "additionalProperties": false})"});
  const std::string doc = R"({"name": "Ada Lovelace", "n": 42, "tags": ["red", "green"]})";
  auto tok = Tokenizer::load(keel::test::source_dir() / "models" / "default");
  GrammarMatcher m(g);
  std::string so_far;
  for (TokenId t : tok->encode(doc)) {
    expect_mask_matches_brute_force(m, so_far);
    ASSERT_TRUE(m.accept_token(t)) << so_far;
    so_far += vocab->bytes(t);
  }
  EXPECT_TRUE(m.is_complete());
}

}  // namespace
}  // namespace keel::grammar::test

namespace keel::grammar::test {
namespace {

TEST(TokenMask, CachePrecomputesTablesInTheBackgroundAndStopsPromptly) {
  auto vocab = default_model_vocab();
  std::shared_ptr<const CompiledGrammar> g;
  {
    GrammarCache cache(vocab, 8, /*precompute=*/true);
    g = cache.get({ConstraintKind::kJsonSchema,
                   R"({"type": "object", "properties": {"a": {"type": "string"},
                      "b": {"type": "array", "items": {"type": "integer"}}}})"});
    std::size_t want = 0;
    for (const auto &n : g->grammar().nodes) want += n.bytes_end > n.bytes_begin;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (g->num_tables() < want && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(g->num_tables(), want);
    // A big grammar still being precomputed when the cache goes away.
    cache.get({ConstraintKind::kJsonObject, ""});
    cache.get({ConstraintKind::kGrammar, "root ::= [a-z]{200}"});
  }                     // joins its worker: promptly, not after every table
  GrammarMatcher m(g);  // the grammar outlives the cache
  EXPECT_TRUE(m.accept_bytes(R"({"a": "x"})"));
}

}  // namespace
}  // namespace keel::grammar::test
