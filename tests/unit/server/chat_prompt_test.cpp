// Chat prompts with tools: a template with no tools section gets them injected (so
// they are never dropped and count_tokens sees them); one with a tools section renders
// them itself. Real tokenizer and templates (models/default, ../shared/testdata).
#include "server/chat_prompt.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/json_fields.h"
#include "support/paths.h"

using namespace keel;
using namespace keel::server;
using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

const fs::path kDefaultModel = fs::path(KEEL_SOURCE_DIR) / "models/default";

const json kTools = json::parse(R"([{"type":"function","function":{"name":"get_weather",
  "description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
const json kUser = json::parse(R"([{"role":"user","content":"Weather in Paris?"}])");

// models/default's tokenizer with another chat template, in a temporary directory.
fs::path model_with_template(const std::string &name, const fs::path &jinja) {
  const fs::path dir = fs::temp_directory_path() / ("keel-chat-prompt-" + name);
  fs::create_directories(dir);
  fs::copy_file(kDefaultModel / "tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  std::ifstream in(jinja);
  std::stringstream src;
  src << in.rdbuf();
  json cfg = json::parse(std::ifstream(kDefaultModel / "tokenizer_config.json"));
  cfg["chat_template"] = src.str();
  std::ofstream(dir / "tokenizer_config.json") << cfg.dump();
  return dir;
}

}  // namespace

TEST(ChatPrompt, ToolsAreInjectedWhenTheTemplateIgnoresThem) {
  auto text = load_model_text(kDefaultModel);
  ASSERT_TRUE(text->has_chat_template());
  const std::string plain = render_chat_prompt(*text, kUser, json(nullptr));
  const std::string with = render_chat_prompt(*text, kUser, kTools);
  EXPECT_EQ(plain.find("get_weather"), std::string::npos);
  EXPECT_NE(with.find("<tools>"), std::string::npos) << with;
  EXPECT_NE(with.find("\"name\":\"get_weather\""), std::string::npos) << with;
  EXPECT_NE(with.find("Weather in Paris?"), std::string::npos);
  // count_tokens and the generation see the same, longer prompt.
  const auto a = encode_chat_prompt(*text, kUser, json(nullptr));
  const auto b = encode_chat_prompt(*text, kUser, kTools);
  EXPECT_GT(b.tokens.size(), a.tokens.size() + 20);
}

TEST(ChatPrompt, ToolTurnsBecomeTextTheTemplateRenders) {
  auto text = load_model_text(kDefaultModel);
  const json turns = json::parse(R"([{"role":"user","content":"Weather?"},
    {"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function",
      "function":{"name":"get_weather","arguments":{"city":"Paris"}}}]},
    {"role":"tool","tool_call_id":"c1","content":"sunny"}])");
  const std::string p = render_chat_prompt(*text, turns, kTools);
  EXPECT_NE(p.find("<tool_call>"), std::string::npos) << p;
  EXPECT_NE(p.find("<tool_response>\nsunny\n</tool_response>"), std::string::npos) << p;
}

TEST(ChatPrompt, NoTemplateFallbackGetsToolsToo) {
  // A template-less model: the plain "role: content" fallback still carries the tools.
  const fs::path dir = fs::temp_directory_path() / "keel-chat-prompt-none";
  fs::create_directories(dir);
  fs::copy_file(kDefaultModel / "tokenizer.json", dir / "tokenizer.json",
                fs::copy_options::overwrite_existing);
  json cfg = json::parse(std::ifstream(kDefaultModel / "tokenizer_config.json"));
  cfg.erase("chat_template");
  std::ofstream(dir / "tokenizer_config.json") << cfg.dump();
  auto text = load_model_text(dir);
  ASSERT_FALSE(text->has_chat_template());
  const std::string p = render_chat_prompt(*text, kUser, kTools);
  EXPECT_EQ(p.rfind("system: # Tools", 0), 0u) << p;
}

TEST(ChatPrompt, ATemplateWithAToolsSectionRendersThemItself) {
  const auto data = test::testdata_dir();
  if (!data) GTEST_SKIP() << "no ../shared/testdata chat templates";
  const fs::path jinja = *data / "chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja";
  auto text = load_model_text(model_with_template("qwen", jinja));
  const std::string with = render_chat_prompt(*text, kUser, kTools);
  EXPECT_EQ(with, text->render_chat(kUser, kTools, true));  // no second copy injected
  EXPECT_NE(with.find("get_weather"), std::string::npos);
}

TEST(ChatPrompt, TemplateKwargsReachTheTemplate) {
  const fs::path jinja = fs::temp_directory_path() / "keel-chat-prompt-kwargs.jinja";
  std::ofstream(jinja) << "{% for m in messages %}{{ m.content }}{% endfor %}"
                          "{% if add_generation_prompt %}<|assistant|>"
                          "{% if enable_thinking is defined and not enable_thinking %}"
                          "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}{% endif %}";
  auto text = load_model_text(model_with_template("kwargs", jinja));
  const auto on = encode_chat_prompt(*text, kUser, json(nullptr), {{"enable_thinking", true}});
  const auto off = encode_chat_prompt(*text, kUser, json(nullptr), {{"enable_thinking", false}});
  EXPECT_TRUE(on.opens_reasoning);
  EXPECT_FALSE(off.opens_reasoning);
  EXPECT_GT(off.tokens.size(), on.tokens.size());
}

TEST(ChatPrompt, ATemplateErrorIsA400NamingTheField) {
  const fs::path jinja = fs::temp_directory_path() / "keel-chat-prompt-raise.jinja";
  std::ofstream(jinja) << "{{ raise_exception('roles must alternate') }}";
  auto text = load_model_text(model_with_template("raise", jinja));
  try {
    encode_chat_prompt(*text, kUser, json(nullptr), json::object(), "input");
    FAIL();
  } catch (const ApiErrorException &e) {
    EXPECT_EQ(e.error.param, "input");
    EXPECT_NE(e.error.message.find("roles must alternate"), std::string::npos);
  }
}
