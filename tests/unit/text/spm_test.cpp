// The Llama 2 SentencePiece model (.model, parsed by hand) against the llama-spm
// vectors of llama.cpp (the same vocabulary), plus SentencePiece decoding rules.
#include <gtest/gtest.h>

#include "test_tokenizers.h"
#include "vocab_test_util.h"

namespace keel {
namespace {

TEST(SentencePiece, Llama2ModelMatchesLlamaSpmVectors) {
  KEEL_REQUIRE_TOKENIZER(tok, test::llama2_spm(), "../shared/testdata/spm/llama2-tokenizer.model");
  EXPECT_EQ(tok->vocab_size(), 32000u);
  const auto dir = *test::testdata_dir() / "vocab";
  const auto cases = test::read_vocab_vectors(dir / "ggml-vocab-llama-spm.gguf.inp",
                                              dir / "ggml-vocab-llama-spm.gguf.out");
  ASSERT_GT(cases.size(), 10u);
  for (const auto &[text, want] : cases) EXPECT_EQ(tok->encode(text), want) << "[" << text << "]";
}

TEST(SentencePiece, BosAndSpecialTokens) {
  KEEL_REQUIRE_TOKENIZER(tok, test::llama2_spm(), "the Llama 2 model");
  EXPECT_EQ(tok->bos(), 1);
  ASSERT_EQ(tok->eos_ids().size(), 1u);
  EXPECT_EQ(tok->eos_ids()[0], 2);
  EXPECT_EQ(tok->encode("Hello", {.add_bos = true}).front(), 1);
  // "</s>" in text is special: plain text unless the caller allows special tokens.
  EXPECT_EQ(tok->encode("a</s>", {.allow_special = true}).back(), 2);
  EXPECT_NE(tok->encode("a</s>").back(), 2);
  EXPECT_TRUE(tok->is_special(1));
  EXPECT_FALSE(tok->is_special(15043));
}

TEST(SentencePiece, DecodeStripsOnlyTheDummyPrefix) {
  KEEL_REQUIRE_TOKENIZER(tok, test::llama2_spm(), "the Llama 2 model");
  for (std::string s : {"Hello world", " Hello world", "  two spaces", "tab\there",
                        "emoji 🦙 and ünïcödé", "日本語"}) {
    EXPECT_EQ(tok->decode(tok->encode(s)), s);
  }
  // Byte-fallback tokens: 🦙 is not a piece, so it is four <0xXX> tokens.
  const auto ids = tok->encode("🦙");
  EXPECT_EQ(ids.size(), 5u);  // "▁" + 4 bytes
  EXPECT_EQ(tok->token_bytes(ids[1]), "\xF0");
  EXPECT_EQ(tok->token_text(ids[1]), "<0xF0>");
  EXPECT_EQ(tok->decode(ids, true), "🦙");
  EXPECT_EQ(tok->token_to_id("▁Hello"), 15043);
}

}  // namespace
}  // namespace keel
