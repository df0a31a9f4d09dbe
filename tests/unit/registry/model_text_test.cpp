#include "registry/model_text.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/paths.h"

namespace keel {
namespace {

namespace fs = std::filesystem;

// A model directory holding the Llama 3 tokenizer that npm ships, with a reserved
// special token renamed <|python_tag|> as Llama 3.1 did (no template).
std::unique_ptr<ModelText> llama31_text(const fs::path &dir) {
  auto npm = test::npm_dir();
  if (!npm) return nullptr;
  const fs::path src = *npm / "@lenml" / "tokenizer-llama3" / "models" / "tokenizer.json";
  if (!fs::exists(src)) return nullptr;
  std::ifstream in(src);
  auto j = nlohmann::json::parse(in);
  for (auto &t : j["added_tokens"])
    if (t["content"] == "<|reserved_special_token_2|>") t["content"] = "<|python_tag|>";
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << j.dump();
  return load_model_text(dir);
}

std::string stream(const ModelText &text, const std::vector<TokenId> &ids) {
  auto s = text.streaming();
  std::string out;
  for (TokenId t : ids) out += s->push(t);
  return out + s->flush();
}

TEST(ModelTextStreaming, KeepsToolCallMarkersAndDropsOtherSpecialTokens) {
  const fs::path dir = fs::temp_directory_path() / ("keel-model-text-" + std::to_string(getpid()));
  auto text = llama31_text(dir);
  if (!text) GTEST_SKIP() << "the npm Llama 3 tokenizer is absent (run scripts/setup)";
  const auto tag = text->encode("<|python_tag|>", false);
  const auto eot = text->encode("<|eot_id|>", false);
  ASSERT_EQ(tag.size(), 1u);
  ASSERT_EQ(eot.size(), 1u);
  auto body = text->encode("{\"name\": \"get_weather\", \"parameters\": {}}", false);
  std::vector<TokenId> ids = tag;
  ids.insert(ids.end(), body.begin(), body.end());
  ids.push_back(eot[0]);
  EXPECT_EQ(stream(*text, ids), "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {}}");
  // Ordinary text around a dropped special token streams as before.
  auto hello = text->encode("Hello", false), world = text->encode(" world", false);
  std::vector<TokenId> ids2 = hello;
  ids2.push_back(eot[0]);
  ids2.insert(ids2.end(), world.begin(), world.end());
  EXPECT_EQ(stream(*text, ids2), "Hello world");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace keel
