// A harmony vocabulary (<|channel|> and <|constrain|> single tokens) without a chat
// template selects the harmony prompt, no BOS, and harmony's thinking-budget markers.
#include <gtest/gtest.h>

#include "fakes.h"
#include "server/chat_prompt.h"
#include "server/thinking_budget_fields.h"

namespace keel::server {
namespace {

using json = nlohmann::ordered_json;

std::vector<TokenId> bytes(std::string_view s) {
  return std::vector<TokenId>(reinterpret_cast<const unsigned char *>(s.data()),
                              reinterpret_cast<const unsigned char *>(s.data()) + s.size());
}

test::ByteText harmony_text() {
  test::ByteText t;
  t.single = {"<|channel|>", "<|constrain|>"};
  return t;
}

TEST(HarmonySelection, PromptIsHarmonyWithoutBos) {
  const auto text = harmony_text();
  ASSERT_EQ(tool_call_format_of(text), ToolCallFormat::kHarmony);
  const json messages = json::parse(R"([{"role": "user", "content": "Hi"}])");
  const std::string p =
      render_chat_prompt(text, messages, json(nullptr), {{"current_date", "2025-06-28"}});
  EXPECT_TRUE(p.starts_with("<|start|>system<|message|>You are ChatGPT")) << p;
  EXPECT_TRUE(p.ends_with("<|start|>user<|message|>Hi<|end|><|start|>assistant")) << p;
  EXPECT_EQ(
      encode_chat_prompt(text, messages, json(nullptr), {{"current_date", "2025-06-28"}}).tokens,
      bytes(p));
  // A plain vocabulary keeps the "role: content" fallback.
  EXPECT_EQ(render_chat_prompt(test::ByteText{}, messages, json(nullptr)), "user: Hi\nassistant:");
}

TEST(HarmonySelection, ThinkingBudgetClosesTheAnalysisMessage) {
  SamplingParams s;
  set_thinking_budget(s, harmony_text(), 100, false);
  EXPECT_EQ(s.thinking_budget, 100);
  EXPECT_EQ(s.thinking_start, bytes("<|channel|>analysis<|message|>"));
  EXPECT_EQ(s.thinking_end, bytes("<|end|><|start|>assistant<|channel|>final<|message|>"));
  SamplingParams t;
  set_thinking_budget(t, test::ByteText{}, 100, false);
  EXPECT_EQ(t.thinking_start, bytes("<think>"));
}

}  // namespace
}  // namespace keel::server
