// Mixture-of-experts configs and checkpoints: config.json fields (qwen3_moe, mixtral),
// `keel make-model` for MoE architectures, and the errors a bad checkpoint gets at load.
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

json qwen3_moe_json() {
  return json{{"model_type", "qwen3_moe"},
              {"vocab_size", 320},
              {"hidden_size", 64},
              {"intermediate_size", 128},
              {"num_hidden_layers", 4},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"head_dim", 32},
              {"num_experts", 8},
              {"num_experts_per_tok", 2},
              {"moe_intermediate_size", 32},
              {"norm_topk_prob", true},
              {"decoder_sparse_step", 1},
              {"mlp_only_layers", json::array({1})}};
}

TEST(MoeConfig, ParsesQwen3Moe) {
  const ModelConfig c = parse_hf_config(qwen3_moe_json().dump(), "config.json");
  EXPECT_EQ(c.arch, Arch::kQwen3Moe);
  EXPECT_TRUE(c.qk_norm);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts, 8);
  EXPECT_EQ(c.moe->top_k, 2);
  EXPECT_EQ(c.moe->expert_intermediate, 32);
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->sparse_layers, (std::vector<bool>{true, false, true, true}));
  json j = qwen3_moe_json();
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = json::array();
  j.erase("norm_topk_prob");  // transformers' default is false
  const ModelConfig d = parse_hf_config(j.dump(), "config.json");
  EXPECT_EQ(d.moe->sparse_layers, (std::vector<bool>{false, true, false, true}));
  EXPECT_FALSE(d.moe->norm_topk_prob);
}

TEST(MoeConfig, Qwen3MoeTakesTransformers5sExpertCountName) {
  json j = qwen3_moe_json();
  j.erase("num_experts");
  j["num_local_experts"] = 6;  // what transformers 5 saves
  EXPECT_EQ(parse_hf_config(j.dump(), "config.json").moe->num_experts, 6);
  j["num_experts"] = 8;  // the released name wins when both are there
  EXPECT_EQ(parse_hf_config(j.dump(), "config.json").moe->num_experts, 8);
}

TEST(MoeConfig, ParsesMixtral) {
  json j = qwen3_moe_json();
  for (const char *k : {"num_experts", "moe_intermediate_size", "norm_topk_prob", "head_dim",
                        "decoder_sparse_step", "mlp_only_layers"})
    j.erase(k);
  j["model_type"] = "mixtral";
  j["num_local_experts"] = 4;
  const ModelConfig c = parse_hf_config(j.dump(), "config.json");
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->naming, MoeConfig::Naming::kMixtral);
  EXPECT_EQ(c.moe->num_experts, 4);
  EXPECT_EQ(c.moe->expert_intermediate, 128);
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->sparse_layers, std::vector<bool>(4, true));
  EXPECT_FALSE(c.qk_norm);
}

TEST(MoeConfig, BadFieldsAreNamed) {
  const test::BadField cases[] = {
      {"num_experts_per_tok", 9, ErrorCode::kFormat,
       "num_experts_per_tok: 9 is not in [1, num_experts]"},
      {"num_experts_per_tok", 0, ErrorCode::kFormat, "num_experts_per_tok: 0"},
      {"num_experts", 0, ErrorCode::kFormat, "num_experts: 0 is out of range"},
      {"num_experts", nullptr, ErrorCode::kFormat, "num_experts: missing"},
      {"moe_intermediate_size", -4, ErrorCode::kFormat, "moe_intermediate_size: -4"},
      {"moe_intermediate_size", "wide", ErrorCode::kFormat,
       "moe_intermediate_size: expected an integer"},
      {"norm_topk_prob", 1, ErrorCode::kFormat, "norm_topk_prob: expected a bool"},
      {"decoder_sparse_step", 0, ErrorCode::kFormat, "decoder_sparse_step: must be positive"},
      {"mlp_only_layers", json::array({7}), ErrorCode::kFormat,
       "mlp_only_layers: 7 is not a layer"},
      {"scoring_func", "sigmoid", ErrorCode::kUnsupported,
       "scoring_func \"sigmoid\" is not supported"},
      {"topk_method", "noaux_tc", ErrorCode::kUnsupported, "topk_method \"noaux_tc\""},
      {"shared_expert_intermediate_size", 256, ErrorCode::kUnsupported,
       "shared_expert_intermediate_size: shared experts are not supported"},
  };
  test::expect_bad_fields(qwen3_moe_json(), cases);
}

MakeModelOptions tiny_moe(const std::filesystem::path &out) {
  MakeModelOptions o;
  o.arch = "qwen3_moe";
  o.shape = "tiny";
  o.dtype = DType::kF32;
  o.seed = 3;
  o.out = out;
  o.threads = 2;
  return o;
}

TEST(MoeMakeModel, WritesAQwen3MoeThatLoads) {
  test::TempDir dir;
  const MakeModelReport r = make_model(tiny_moe(dir.path()));
  const json cfg = json::parse(slurp(dir / "config.json"));
  EXPECT_EQ(cfg["model_type"], "qwen3_moe");
  EXPECT_EQ(cfg["architectures"][0], "Qwen3MoeForCausalLM");
  EXPECT_EQ(cfg["num_experts"], 8);
  EXPECT_EQ(cfg["num_experts_per_tok"], 2);
  EXPECT_EQ(cfg["moe_intermediate_size"], 32);
  auto w = ModelWeights::open(dir.path());
  ASSERT_TRUE(w->config().moe);
  EXPECT_EQ(w->config().moe->num_experts, 8);
  EXPECT_TRUE(w->find("model.layers.1.mlp.experts.7.down_proj.weight"));
  EXPECT_TRUE(w->find("model.layers.0.mlp.gate.weight"));
  EXPECT_FALSE(w->find("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_EQ(w->find("model.layers.1.mlp.experts.7.down_proj.weight")->shape,
            (std::vector<std::int64_t>{64, 32}));
  EXPECT_GT(r.parameters, 0u);
}

TEST(MoeMakeModel, RealShapesAndRefusals) {
  MakeModelOptions o;
  o.arch = "qwen3_moe";
  o.shape = "qwen3-30b-a3b";
  const ModelConfig c = make_model_config(o);
  EXPECT_EQ(c.num_layers, 48);
  EXPECT_EQ(c.moe->num_experts, 128);
  EXPECT_EQ(c.moe->top_k, 8);
  EXPECT_EQ(c.moe->expert_intermediate, 768);
  o.arch = "mixtral";
  o.shape = "mixtral-8x7b";
  EXPECT_EQ(make_model_config(o).moe->expert_intermediate, 14336);
  o.shape = "qwen3-30b-a3b";
  EXPECT_THROW(make_model_config(o), Error);
  o.arch = "llama";
  o.shape = "tiny";
  o.experts = 4;
  EXPECT_THROW(make_model_config(o), Error);
}

TEST(MoeCheckpoint, MissingExpertIsNamed) {
  test::TempDir dir;
  make_model(tiny_moe(dir.path()));
  rename_tensor(dir / "model.safetensors", "model.layers.1.mlp.experts.5.up_proj.weight",
                "model.layers.1.mlp.experts.5.up_proj.weighX");
  EXPECT_NE(
      open_error(dir.path()).find("missing tensor model.layers.1.mlp.experts.5.up_proj.weight"),
      std::string::npos);
}

TEST(MoeCheckpoint, FewerExpertsThanTheConfigSays) {
  test::TempDir dir;
  make_model(tiny_moe(dir.path()));
  json cfg = json::parse(slurp(dir / "config.json"));
  cfg["num_experts"] = 9;
  spit(dir / "config.json", cfg.dump());
  const std::string e = open_error(dir.path());
  EXPECT_NE(e.find("model.layers.0.mlp.gate.weight: shape [8, 64], the config implies [9, 64]"),
            std::string::npos)
      << e;
}

TEST(MoeCheckpoint, MisShapedExpertsAreNamed) {
  test::TempDir dir;
  make_model(tiny_moe(dir.path()));
  json cfg = json::parse(slurp(dir / "config.json"));
  cfg["moe_intermediate_size"] = 16;
  spit(dir / "config.json", cfg.dump());
  const std::string e = open_error(dir.path());
  EXPECT_NE(e.find("model.layers.0.mlp.experts.0.gate_proj.weight: shape [32, 64], the config "
                   "implies [16, 64]"),
            std::string::npos)
      << e;
}

TEST(MoeCheckpoint, MissingRouterIsNamed) {
  test::TempDir dir;
  make_model(tiny_moe(dir.path()));
  rename_tensor(dir / "model.safetensors", "model.layers.0.mlp.gate.weight",
                "model.layers.0.mlp.gatX.weight");
  EXPECT_NE(open_error(dir.path()).find("missing tensor model.layers.0.mlp.gate.weight"),
            std::string::npos);
}

}  // namespace
}  // namespace keel
