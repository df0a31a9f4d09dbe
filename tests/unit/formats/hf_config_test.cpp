#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/model_config.h"
#include "support/paths.h"
#include "temp_dir.h"

namespace keel {
namespace {

using nlohmann::json;

json base_llama() {
  return {{"model_type", "llama"},    {"vocab_size", 1000},     {"hidden_size", 256},
          {"intermediate_size", 512}, {"num_hidden_layers", 2}, {"num_attention_heads", 8},
          {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-5},   {"rope_theta", 500000.0},
          {"bos_token_id", 1},        {"eos_token_id", 2},      {"max_position_embeddings", 2048}};
}

std::string error_of(const json &j) {
  try {
    parse_hf_config(j.dump(), "x/config.json");
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("x/config.json: "), std::string::npos) << e.what();
    return e.what();
  }
  return "";
}

TEST(HfConfig, LlamaDefaultsAndDerivedHeadDim) {
  auto c = parse_hf_config(base_llama().dump(), "config.json");
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kNone);
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<TokenId>{2}));
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.sliding_window);
}

TEST(HfConfig, RopeScalingKinds) {
  auto j = base_llama();
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  auto c = parse_hf_config(j.dump(), "c");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position, 8192);

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // the older key
  c = parse_hf_config(j.dump(), "c");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 2.0);

  j["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", 4.0},
                       {"beta_fast", 16.0},
                       {"original_max_position_embeddings", 4096},
                       {"attention_factor", 1.2}};
  c = parse_hf_config(j.dump(), "c");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(*c.rope_scaling.attention_factor, 1.2);

  // transformers 5: only rope_parameters, with rope_theta inside.
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 3.0}, {"rope_theta", 1234.0}};
  c = parse_hf_config(j.dump(), "c");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 3.0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1234.0);

  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 3.0}};
  try {
    parse_hf_config(j.dump(), "c");
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
}

TEST(HfConfig, QwenVariants) {
  auto j = base_llama();
  j["model_type"] = "qwen2";
  j["sliding_window"] = 32768;
  j["use_sliding_window"] = false;
  j["tie_word_embeddings"] = true;
  j["eos_token_id"] = {151643, 2};
  j["vocab_size"] = 152000;
  auto c = parse_hf_config(j.dump(), "c");
  EXPECT_EQ(c.arch, Arch::kQwen2);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.attention_out_bias);
  EXPECT_FALSE(c.sliding_window);  // present but switched off
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<TokenId>{151643, 2}));

  j["model_type"] = "qwen3";
  j["head_dim"] = 128;  // != hidden / heads
  c = parse_hf_config(j.dump(), "c");
  EXPECT_EQ(c.arch, Arch::kQwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 128);

  j["model_type"] = "mistral";
  j.erase("use_sliding_window");
  j["sliding_window"] = 4096;
  c = parse_hf_config(j.dump(), "c");
  EXPECT_EQ(c.arch, Arch::kMistral);
  EXPECT_EQ(c.sliding_window, 4096);
}

TEST(HfConfig, BadConfigsNameTheFileAndField) {
  EXPECT_NE(error_of(json::array()).find("not a JSON object"), std::string::npos);
  auto j = base_llama();
  j.erase("hidden_size");
  EXPECT_NE(error_of(j).find("hidden_size: missing"), std::string::npos);
  j = base_llama();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("num_key_value_heads"), std::string::npos);
  j = base_llama();
  j["num_hidden_layers"] = "two";
  EXPECT_NE(error_of(j).find("num_hidden_layers: expected an integer"), std::string::npos);
  j = base_llama();
  j["vocab_size"] = -1;
  EXPECT_NE(error_of(j).find("vocab_size"), std::string::npos);
  j = base_llama();
  j["eos_token_id"] = 5000;
  EXPECT_NE(error_of(j).find("eos_token_id"), std::string::npos);
  j = base_llama();
  j["rope_scaling"] = {{"rope_type", "llama3"}};
  EXPECT_NE(error_of(j).find("factor"), std::string::npos);
  j = base_llama();
  j["model_type"] = "gpt2";
  EXPECT_NE(error_of(j).find("gpt2"), std::string::npos);
  EXPECT_NE(error_of(json::parse("{}")).find("model_type"), std::string::npos);
  try {
    parse_hf_config("{not json", "x/config.json");
    FAIL();
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("x/config.json: not valid JSON"), std::string::npos);
  }
}

TEST(HfConfig, GenerationConfigEosIsMerged) {
  test::TempDir dir;
  auto j = base_llama();
  j["eos_token_id"] = 2;
  test::write_file(dir / "config.json", j.dump());
  test::write_file(dir / "generation_config.json",
                   json{{"eos_token_id", {7, 2, 9}}, {"bos_token_id", 1}}.dump());
  auto c = load_hf_config(dir.path());
  EXPECT_EQ(c.eos_token_ids, (std::vector<TokenId>{2, 7, 9}));
  test::write_file(dir / "generation_config.json", "{");
  EXPECT_THROW(load_hf_config(dir.path()), Error);
  std::filesystem::remove(dir / "config.json");
  try {
    load_hf_config(dir.path());
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

TEST(HfConfig, ReadsCommittedFixtureConfigs) {
  const auto models = test::fixtures_dir() / "models";
  if (!std::filesystem::exists(models)) GTEST_SKIP() << "no tests/fixtures/models";
  int n = 0;
  for (const auto &e : std::filesystem::directory_iterator(models)) {
    if (!std::filesystem::exists(e.path() / "config.json")) continue;
    SCOPED_TRACE(e.path().string());
    auto c = load_hf_config(e.path());
    const auto j = json::parse(std::ifstream(e.path() / "config.json"));
    EXPECT_EQ(c.hidden_size, j["hidden_size"].get<std::int64_t>());
    EXPECT_EQ(c.num_kv_heads, j["num_key_value_heads"].get<std::int64_t>());
    EXPECT_EQ(c.tie_word_embeddings, j["tie_word_embeddings"].get<bool>());
    if (j.contains("head_dim")) EXPECT_EQ(c.head_dim, j["head_dim"].get<std::int64_t>());
    const std::string name = e.path().filename().string();
    if (name.starts_with("llama3")) EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLlama3);
    if (name.starts_with("llama_yarn")) EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
    if (name.starts_with("llama_linear"))
      EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
    if (name.starts_with("qwen3")) EXPECT_TRUE(c.qk_norm);
    if (name.starts_with("qwen2")) EXPECT_TRUE(c.attention_bias);
    ++n;
  }
  EXPECT_GT(n, 0);
}

}  // namespace
}  // namespace keel
