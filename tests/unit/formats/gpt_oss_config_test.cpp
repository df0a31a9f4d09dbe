// gpt-oss (gpt_oss) config.json: the released fields (layer_types, sliding_window,
// swiglu_limit, attention biases, experts, YaRN without truncation), the tensor name
// helpers, and the errors a bad config gets, naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/model_config.h"

namespace keel {
namespace {

using nlohmann::json;

// gpt-oss-20b's config.json fields, at a tiny size.
json gpt_oss_json() {
  return json{{"model_type", "gpt_oss"},
              {"architectures", {"GptOssForCausalLM"}},
              {"vocab_size", 320},
              {"hidden_size", 64},
              {"intermediate_size", 32},
              {"num_hidden_layers", 4},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 16},
              {"attention_bias", true},
              {"num_local_experts", 8},
              {"experts_per_token", 2},
              {"num_experts_per_tok", 2},
              {"layer_types",
               {"sliding_attention", "full_attention", "sliding_attention", "full_attention"}},
              {"sliding_window", 8},
              {"swiglu_limit", 7.0},
              {"rope_theta", 150000},
              {"rope_scaling",
               {{"rope_type", "yarn"},
                {"factor", 32.0},
                {"beta_fast", 32.0},
                {"beta_slow", 1.0},
                {"original_max_position_embeddings", 4096},
                {"truncate", false}}},
              {"max_position_embeddings", 131072},
              {"rms_norm_eps", 1e-5},
              {"tie_word_embeddings", false}};
}

std::pair<ErrorCode, std::string> parse_error(const json &j) {
  try {
    parse_hf_config(j.dump(), "config.json");
  } catch (const Error &e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::kInternal, "no error"};
}

TEST(GptOssConfig, ParsesTheReleasedFields) {
  const ModelConfig c = parse_hf_config(gpt_oss_json().dump(), "config.json");
  EXPECT_EQ(c.arch, Arch::kGptOss);
  EXPECT_STREQ(arch_name(c.arch), "gpt_oss");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.attention_out_bias);
  EXPECT_TRUE(c.attention_sinks);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position, 4096);
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_DOUBLE_EQ(c.rope_theta, 150000.0);
  ASSERT_EQ(c.sliding_layers.size(), 4u);
  EXPECT_EQ(c.window_of(0), std::optional<std::int64_t>(8));
  EXPECT_EQ(c.window_of(1), std::nullopt);
  EXPECT_EQ(c.window_of(2), std::optional<std::int64_t>(8));
  EXPECT_EQ(c.window_of(3), std::nullopt);
  ASSERT_TRUE(c.moe);
  const MoeConfig &m = *c.moe;
  EXPECT_EQ(m.scoring, MoeConfig::Scoring::kTopkSoftmax);
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(m.expert_intermediate, 32);
  EXPECT_TRUE(m.router_bias);
  EXPECT_TRUE(m.expert_bias);
  ASSERT_TRUE(m.swiglu_limit);
  EXPECT_DOUBLE_EQ(*m.swiglu_limit, 7.0);
  EXPECT_DOUBLE_EQ(m.swiglu_alpha, 1.702);
  for (std::int64_t l = 0; l < 4; ++l) EXPECT_TRUE(m.sparse(l));
}

TEST(GptOssConfig, EitherExpertsPerTokenNameIsRead) {
  json j = gpt_oss_json();
  j.erase("num_experts_per_tok");
  j["experts_per_token"] = 3;
  EXPECT_EQ(parse_hf_config(j.dump(), "config.json").moe->top_k, 3);
  j = gpt_oss_json();
  j.erase("experts_per_token");
  j["num_experts_per_tok"] = 4;
  EXPECT_EQ(parse_hf_config(j.dump(), "config.json").moe->top_k, 4);
}

TEST(GptOssConfig, WindowOfWithoutLayerTypesIsTheSameForEveryLayer) {
  ModelConfig c;
  c.num_layers = 3;
  EXPECT_EQ(c.window_of(1), std::nullopt);
  c.sliding_window = 16;
  for (std::int64_t l = 0; l < 3; ++l) EXPECT_EQ(c.window_of(l), std::optional<std::int64_t>(16));
  c.sliding_layers = {false, true, false};
  EXPECT_EQ(c.window_of(0), std::nullopt);
  EXPECT_EQ(c.window_of(1), std::optional<std::int64_t>(16));
}

TEST(GptOssConfig, NameHelpers) {
  const ModelConfig c = parse_hf_config(gpt_oss_json().dump(), "config.json");
  const MoeConfig &m = *c.moe;
  EXPECT_EQ(moe_router_name(m, 3), "model.layers.3.mlp.gate.weight");
  EXPECT_EQ(moe_router_logit_bias_name(m, 3), "model.layers.3.mlp.gate.bias");
  EXPECT_EQ(moe_expert_name(m, 1, 5, ExpertMatrix::kUp),
            "model.layers.1.mlp.experts.5.up_proj.weight");
  EXPECT_EQ(moe_expert_bias_name(m, 1, 5, ExpertMatrix::kGate),
            "model.layers.1.mlp.experts.5.gate_proj.bias");
  EXPECT_EQ(moe_expert_bias_name(m, 0, 7, ExpertMatrix::kDown),
            "model.layers.0.mlp.experts.7.down_proj.bias");
  EXPECT_EQ(attention_sinks_name(2), "model.layers.2.self_attn.sinks");
}

TEST(GptOssConfig, BadFieldsAreNamed) {
  struct Case {
    const char *field;
    json value;
    const char *expect;
  };
  const Case cases[] = {
      {"layer_types", json{"sliding_attention", "full_attention"}, "layer_types"},
      {"layer_types",
       json{"sliding_attention", "chunked_attention", "full_attention", "full_attention"},
       "chunked_attention"},
      {"layer_types", json("sliding_attention"), "layer_types"},
      {"sliding_window", json(nullptr), "layer_types"},
      {"sliding_window", json(0), "sliding_window"},
      {"swiglu_limit", json(-1.0), "swiglu_limit"},
      {"swiglu_limit", json("7"), "swiglu_limit"},
      {"num_local_experts", json(nullptr), "num_local_experts"},
      {"num_local_experts", json(1), "num_experts_per_tok"},
      {"experts_per_token", json(3), "experts_per_token"},
      {"intermediate_size", json(0), "intermediate_size"},
  };
  for (const Case &k : cases) {
    json j = gpt_oss_json();
    j[k.field] = k.value;
    const auto [code, what] = parse_error(j);
    EXPECT_NE(code, ErrorCode::kInternal) << k.field << " " << k.value.dump();
    EXPECT_NE(what.find(k.expect), std::string::npos) << k.field << ": " << what;
  }
}

}  // namespace
}  // namespace keel
