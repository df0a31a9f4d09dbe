// GLM-4.5 (glm4_moe) configs and checkpoints: config.json fields, `keel make-model
// --arch glm4_moe`, and the errors a bad config or checkpoint gets at load.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "checkpoint_edit.h"
#include "config_error.h"
#include "core/error.h"
#include "formats/make_model.h"
#include "formats/model_config.h"
#include "formats/model_weights.h"
#include "temp_dir.h"

namespace keel {
namespace {

using nlohmann::json;
using test::open_error;
using test::rename_tensor;
using test::slurp;
using test::spit;

// GLM-4.5-Air's config.json fields, at a tiny size.
json glm4_moe_json() {
  return json{{"model_type", "glm4_moe"},
              {"vocab_size", 320},
              {"hidden_size", 64},
              {"intermediate_size", 128},
              {"num_hidden_layers", 3},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 32},
              {"partial_rotary_factor", 0.5},
              {"attention_bias", true},
              {"use_qk_norm", false},
              {"n_routed_experts", 8},
              {"n_shared_experts", 1},
              {"num_experts_per_tok", 2},
              {"moe_intermediate_size", 32},
              {"first_k_dense_replace", 1},
              {"n_group", 2},
              {"topk_group", 1},
              {"norm_topk_prob", true},
              {"routed_scaling_factor", 2.5},
              {"num_nextn_predict_layers", 1}};
}

TEST(Glm4MoeConfig, ParsesTheReleasedFields) {
  const ModelConfig c = parse_hf_config(glm4_moe_json().dump(), "config.json");
  EXPECT_EQ(c.arch, Arch::kGlm4Moe);
  EXPECT_STREQ(arch_name(c.arch), "glm4_moe");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.attention_out_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.5);
  ASSERT_TRUE(c.moe);
  const MoeConfig &m = *c.moe;
  EXPECT_EQ(m.scoring, MoeConfig::Scoring::kSigmoid);
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(m.expert_intermediate, 32);
  EXPECT_EQ(m.shared_intermediate, 32);
  EXPECT_EQ(m.n_group, 2);
  EXPECT_EQ(m.topk_group, 1);
  EXPECT_DOUBLE_EQ(m.routed_scaling_factor, 2.5);
  EXPECT_EQ(m.nextn_predict_layers, 1);
  EXPECT_EQ(m.sparse_layers, (std::vector<bool>{false, true, true}));
  EXPECT_EQ(moe_router_bias_name(m, 2), "model.layers.2.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(moe_shared_name(m, 1, ExpertMatrix::kDown),
            "model.layers.1.mlp.shared_experts.down_proj.weight");

  // transformers 5 keeps partial_rotary_factor in rope_parameters; use_qk_norm (GLM-4.5).
  json j = glm4_moe_json();
  j.erase("partial_rotary_factor");
  j["rope_parameters"] = {
      {"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.25}};
  j["use_qk_norm"] = true;
  const ModelConfig v5 = parse_hf_config(j.dump(), "config.json");
  EXPECT_DOUBLE_EQ(v5.partial_rotary_factor, 0.25);
  EXPECT_TRUE(v5.qk_norm);
}

TEST(Glm4MoeConfig, BadFieldsAndUnknownRoutingAreNamed) {
  const test::BadField cases[] = {
      {"scoring_func", "softmax", ErrorCode::kUnsupported,
       "scoring_func \"softmax\" is not supported (sigmoid only)"},
      {"topk_method", "greedy", ErrorCode::kUnsupported,
       "topk_method \"greedy\" is not supported (noaux_tc only)"},
      {"n_routed_experts", nullptr, ErrorCode::kFormat, "n_routed_experts: missing"},
      {"n_routed_experts", 0, ErrorCode::kFormat, "n_routed_experts: 0 is out of range"},
      {"n_group", 3, ErrorCode::kFormat, "n_group: 3 does not divide n_routed_experts"},
      {"n_group", 8, ErrorCode::kFormat, "n_group: groups of fewer than two experts"},
      {"topk_group", 3, ErrorCode::kFormat, "topk_group: 3 is not in [1, n_group]"},
      {"num_experts_per_tok", 5, ErrorCode::kFormat,
       "num_experts_per_tok: 5 is more than the experts of topk_group groups"},
      {"routed_scaling_factor", -1.0, ErrorCode::kFormat,
       "routed_scaling_factor: must be positive"},
      {"routed_scaling_factor", "big", ErrorCode::kFormat,
       "routed_scaling_factor: expected a number"},
      {"n_shared_experts", -1, ErrorCode::kFormat, "n_shared_experts: -1 is out of range"},
      {"first_k_dense_replace", -2, ErrorCode::kFormat, "first_k_dense_replace: must not be"},
      {"partial_rotary_factor", 0.3, ErrorCode::kFormat,
       "partial_rotary_factor: 0.300000 does not give an even part of head_dim"},
  };
  test::expect_bad_fields(glm4_moe_json(), cases);
}

MakeModelOptions tiny_glm(const std::filesystem::path &out) {
  MakeModelOptions o;
  o.arch = "glm4_moe";
  o.shape = "tiny";
  o.dtype = DType::kBF16;
  o.seed = 4;
  o.out = out;
  o.threads = 2;
  return o;
}

TEST(Glm4MoeMakeModel, WritesTheReleasedNamesAndLoads) {
  test::TempDir dir;
  make_model(tiny_glm(dir.path()));
  const json cfg = json::parse(slurp(dir / "config.json"));
  EXPECT_EQ(cfg["model_type"], "glm4_moe");
  EXPECT_EQ(cfg["architectures"][0], "Glm4MoeForCausalLM");
  EXPECT_EQ(cfg["n_routed_experts"], 8);
  EXPECT_EQ(cfg["n_shared_experts"], 1);
  EXPECT_EQ(cfg["first_k_dense_replace"], 1);
  EXPECT_EQ(cfg["partial_rotary_factor"], 0.5);
  auto w = ModelWeights::open(dir.path());
  ASSERT_TRUE(w->config().moe);
  EXPECT_EQ(w->config().arch, Arch::kGlm4Moe);
  EXPECT_TRUE(w->find("model.layers.0.mlp.gate_proj.weight"));  // the dense first layer
  EXPECT_FALSE(w->find("model.layers.0.mlp.gate.weight"));
  EXPECT_TRUE(w->find("model.layers.2.mlp.experts.7.down_proj.weight"));
  EXPECT_TRUE(w->find("model.layers.1.mlp.shared_experts.up_proj.weight"));
  EXPECT_TRUE(w->find("model.layers.1.self_attn.q_proj.bias"));
  const TensorView *bias = w->find("model.layers.1.mlp.gate.e_score_correction_bias");
  ASSERT_TRUE(bias);
  EXPECT_EQ(bias->dtype, DType::kF32);  // float32, as released

  MakeModelOptions air;
  air.arch = "glm4_moe";
  air.shape = "glm-4.5-air";
  const ModelConfig c = make_model_config(air);
  EXPECT_EQ(c.num_layers, 46);
  EXPECT_EQ(c.num_heads, 96);
  EXPECT_EQ(c.moe->num_experts, 128);
  EXPECT_EQ(c.moe->expert_intermediate, 1408);
  EXPECT_FALSE(c.moe->sparse(0));
  EXPECT_TRUE(c.moe->sparse(45));
  air.shape = "qwen3-30b-a3b";
  EXPECT_THROW(make_model_config(air), Error);
}

TEST(Glm4MoeCheckpoint, MissingCorrectionBiasOrSharedExpertIsNamed) {
  for (const char *name : {"model.layers.2.mlp.gate.e_score_correction_bias",
                           "model.layers.1.mlp.shared_experts.gate_proj.weight",
                           "model.layers.2.mlp.experts.3.down_proj.weight"}) {
    test::TempDir dir;
    make_model(tiny_glm(dir.path()));
    std::string renamed = name;
    renamed.back() = 'X';
    rename_tensor(dir / "model.safetensors", name, renamed);
    EXPECT_NE(open_error(dir.path()).find("missing tensor " + std::string(name)), std::string::npos)
        << name;
  }
}

TEST(Glm4MoeCheckpoint, MisShapedSharedExpertIsNamed) {
  test::TempDir dir;
  make_model(tiny_glm(dir.path()));
  json cfg = json::parse(slurp(dir / "config.json"));
  cfg["n_shared_experts"] = 2;  // the checkpoint's shared expert is 1 x 32 wide
  spit(dir / "config.json", cfg.dump());
  const std::string e = open_error(dir.path());
  EXPECT_NE(e.find("model.layers.1.mlp.shared_experts.gate_proj.weight: shape [32, 64], the "
                   "config implies [64, 64]"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace keel
