// Random schemas (fixed seeds, bounded size): each compiles, and on the default
// model's vocabulary every step's mask equals brute force, is never empty before the
// end, and finished documents validate against the schema.
#include <gtest/gtest.h>

#include <iostream>
#include <random>

#include "grammar/constraint.h"
#include "grammar/matcher.h"
#include "schema_validator.h"
#include "vocab_fixtures.h"

namespace keel::grammar::test {
namespace {

ojson random_schema(std::mt19937 &rng, int depth) {
  auto coin = [&](int n) { return int(rng() % unsigned(n)); };
  const int kind = coin(depth >= 2 ? 6 : 9);
  switch (kind) {
    case 0: {
      ojson s{{"type", "string"}};
      if (coin(2)) s["maxLength"] = coin(6);
      return s;
    }
    case 1: {
      ojson s{{"type", "integer"}};
      if (coin(2)) s["minimum"] = coin(50) - 20;
      if (coin(2)) s["maximum"] = coin(500) + 30;
      return s;
    }
    case 2:
      return {{"type", coin(2) ? "number" : "boolean"}};
    case 3:
      return {{"enum", ojson::array({"a", "bc", 3, nullptr})}};
    case 4:
      return {{"type", "string"}, {"pattern", "^[a-c]{1,3}$"}};
    case 5:
      return {{"type", ojson::array({"string", "null"})}, {"maxLength", 3}};
    case 6:
    case 7: {
      ojson props = ojson::object();
      ojson required = ojson::array();
      const int n = 1 + coin(3);
      for (int i = 0; i < n; ++i) {
        std::string key = std::string(1, char('p' + i));
        props[key] = random_schema(rng, depth + 1);
        if (coin(3)) required.push_back(key);
      }
      return {{"type", "object"},
              {"properties", props},
              {"required", required},
              {"additionalProperties", false}};
    }
    default: {
      ojson s{{"type", "array"}, {"items", random_schema(rng, depth + 1)}};
      s["maxItems"] = 1 + coin(3);
      if (coin(2)) s["minItems"] = 1;
      return s;
    }
  }
}

TEST(RandomSchemaFuzz, MasksMatchBruteForceAndDocumentsValidate) {
  auto vocab = default_model_vocab();
  int completed = 0, total = 0;
  for (unsigned seed = 0; seed < 60; ++seed) {
    std::mt19937 rng(seed);
    ojson schema = random_schema(rng, 0);
    SCOPED_TRACE(schema.dump());
    GrammarCache cache(vocab);
    auto g = cache.get({ConstraintKind::kJsonSchema, schema.dump()});
    GrammarMatcher m(g);
    TokenBitmask mask;
    std::string doc;
    ++total;
    for (int step = 0; step < 150 && !m.is_terminated(); ++step) {
      m.fill_next_token_bitmask(mask);
      ASSERT_GT(mask.count(), 0u) << doc;
      std::vector<TokenId> allowed, closing;
      for (std::size_t id = 0; id < vocab->size(); ++id) {
        const bool ok = m.accept_token(TokenId(id));
        if (ok) m.rollback(1);
        ASSERT_EQ(mask.test(TokenId(id)), ok)
            << "token '" << vocab->bytes(TokenId(id)) << "' after " << doc;
        if (!ok) continue;
        allowed.push_back(TokenId(id));
        const std::string &b = vocab->bytes(TokenId(id));
        if (vocab->is_eos(TokenId(id)) || b.find_first_of("\"}]") != std::string::npos)
          closing.push_back(TokenId(id));
      }
      const auto &from = (!closing.empty() && rng() % 3 != 0) ? closing : allowed;
      const TokenId next = from[rng() % from.size()];
      ASSERT_TRUE(m.accept_token(next));
      if (!m.is_terminated()) doc += vocab->bytes(next);
    }
    if (!m.is_terminated()) continue;
    ++completed;
    ojson value = ojson::parse(doc, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << doc;
    EXPECT_EQ(validate(schema, schema, value), "") << doc;
  }
  EXPECT_GE(completed, total * 2 / 3);
  std::cout << completed << " of " << total << " random schemas generated a finished document\n";
}

}  // namespace
}  // namespace keel::grammar::test
