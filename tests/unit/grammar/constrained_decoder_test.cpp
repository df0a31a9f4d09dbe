// The engine-facing loop: mask a row of logits, take its argmax, advance; the output
// is a valid document ending in EOS, whatever the logits say.
#include "grammar/constrained_decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "grammar/constraint.h"
#include "schema_validator.h"
#include "vocab_fixtures.h"

namespace keel::grammar::test {
namespace {

TEST(ConstrainedDecoder, GreedyOnRandomLogitsYieldsAValidDocument) {
  auto vocab = default_model_vocab();
  GrammarCache cache(vocab);
  const char *schema =
      R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
      "temp": {"type": "integer", "minimum": -50, "maximum": 60}, "sunny": {"type": "boolean"}},
      "required": ["city", "temp", "sunny"], "additionalProperties": false})";
  for (unsigned seed = 0; seed < 5; ++seed) {
    ConstrainedDecoder dec(cache.get({ConstraintKind::kJsonSchema, schema}));
    std::mt19937 rng(seed);
    std::normal_distribution<float> noise(0.0f, 3.0f);
    std::vector<float> logits(vocab->size());
    std::string doc;
    bool done = false;
    for (int step = 0; step < 200 && !done; ++step) {
      for (float &l : logits) l = noise(rng);
      ASSERT_TRUE(dec.mask_logits(logits)) << doc;
      const auto best = TokenId(std::max_element(logits.begin(), logits.end()) - logits.begin());
      ASSERT_FALSE(std::isinf(logits[best]));
      auto status = dec.accept(best);
      ASSERT_NE(status, ConstrainedDecoder::Status::kRejected);
      done = status == ConstrainedDecoder::Status::kComplete;
      if (!done) doc += vocab->bytes(best);
    }
    ASSERT_TRUE(done) << "no EOS within 200 tokens: " << doc;
    auto value = ojson::parse(doc);
    EXPECT_EQ(validate(ojson::parse(schema), ojson::parse(schema), value), "") << doc;
  }
}

TEST(ConstrainedDecoder, RejectsATokenOutsideTheMask) {
  auto vocab = default_model_vocab();
  GrammarCache cache(vocab);
  ConstrainedDecoder dec(cache.get({ConstraintKind::kChoice, R"(["yes", "no"])"}));
  std::vector<float> logits(vocab->size(), 0.0f);
  ASSERT_TRUE(dec.mask_logits(logits));
  const std::size_t allowed =
      std::count_if(logits.begin(), logits.end(), [](float l) { return !std::isinf(l); });
  EXPECT_EQ(allowed, dec.mask().count());
  EXPECT_GT(allowed, 0u);
  EXPECT_FALSE(dec.is_complete());
  EXPECT_EQ(dec.accept(vocab->eos_ids()[0]), ConstrainedDecoder::Status::kRejected);
}

}  // namespace
}  // namespace keel::grammar::test

namespace keel::grammar::test {
namespace {

TEST(ConstrainedDecoder, EngineStopTokensEndACompleteDocumentOnly) {
  auto vocab = default_model_vocab();
  GrammarCache cache(vocab);
  ConstrainedDecoder dec(cache.get({ConstraintKind::kChoice, R"(["a"])"}));
  const TokenId stop = 4;  // a special token, not the vocabulary's EOS
  ASSERT_FALSE(vocab->is_eos(stop));
  std::vector<float> logits(vocab->size(), 0.0f);
  const TokenId ends[] = {stop};
  ASSERT_TRUE(dec.mask_logits(logits, ends));
  EXPECT_TRUE(std::isinf(logits[stop]));  // not before the document is complete
  TokenId token_a = -1;
  for (std::size_t id = 0; id < vocab->size(); ++id)
    if (vocab->bytes(TokenId(id)) == "a") token_a = TokenId(id);
  ASSERT_GE(token_a, 0);
  ASSERT_EQ(dec.accept(token_a), ConstrainedDecoder::Status::kContinue);
  std::fill(logits.begin(), logits.end(), 0.0f);
  ASSERT_TRUE(dec.mask_logits(logits, ends));
  EXPECT_FALSE(std::isinf(logits[stop]));
  EXPECT_EQ(dec.accept(stop), ConstrainedDecoder::Status::kComplete);
}

}  // namespace
}  // namespace keel::grammar::test
