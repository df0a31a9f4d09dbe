// Multi-head latent attention configs and checkpoints (deepseek_v3, glm_moe_dsa):
// config.json fields, the latent KV layout's size, `keel make-model --arch deepseek_v3 |
// glm_moe_dsa`, and the errors a bad config or checkpoint gets at load.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

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

// DeepSeek-V3's config.json fields, at a tiny size.
json deepseek_json() {
  return json{{"model_type", "deepseek_v3"},
              {"vocab_size", 320},
              {"hidden_size", 64},
              {"intermediate_size", 96},
              {"num_hidden_layers", 3},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 4},
              {"q_lora_rank", 48},
              {"kv_lora_rank", 32},
              {"qk_nope_head_dim", 16},
              {"qk_rope_head_dim", 8},
              {"v_head_dim", 24},
              {"head_dim", 8},
              {"n_routed_experts", 8},
              {"n_shared_experts", 1},
              {"num_experts_per_tok", 2},
              {"moe_intermediate_size", 32},
              {"first_k_dense_replace", 1},
              {"n_group", 2},
              {"topk_group", 1},
              {"norm_topk_prob", true},
              {"routed_scaling_factor", 2.5},
              {"scoring_func", "sigmoid"},
              {"topk_method", "noaux_tc"},
              {"rope_theta", 10000.0},
              {"rope_scaling",
               {{"type", "yarn"},
                {"factor", 40},
                {"original_max_position_embeddings", 4096},
                {"beta_fast", 32},
                {"beta_slow", 1},
                {"mscale", 1.0},
                {"mscale_all_dim", 1.0}}}};
}

json glm5_json() {
  json j = deepseek_json();
  j["model_type"] = "glm_moe_dsa";
  j.erase("rope_scaling");
  j["index_topk"] = 8;
  j["index_n_heads"] = 4;
  j["index_head_dim"] = 16;
  j["indexer_types"] = {"full", "shared", "full"};
  return j;
}

TEST(MlaConfig, ParsesDeepseekV3) {
  const ModelConfig c = parse_hf_config(deepseek_json().dump(), "config.json");
  EXPECT_EQ(c.arch, Arch::kDeepseekV3);
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.kv_layout, KvLayout::kLatent);
  EXPECT_EQ(c.head_dim, 24);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);  // rope_interleave defaults to true
  EXPECT_EQ(kv_values_per_token_layer(c), 32 + 8);
  // (nope + rope)^-1/2 times yarn's mscale(40, 1)^2; the rope's own factor is 1/1.
  const double ms = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.mla->softmax_scale, ms * ms / std::sqrt(24.0), 1e-12);
  ASSERT_TRUE(c.rope_scaling.attention_factor);
  EXPECT_NEAR(*c.rope_scaling.attention_factor, 1.0, 1e-12);
  EXPECT_FALSE(c.mla->dsa());
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->scoring, MoeConfig::Scoring::kSigmoid);
  EXPECT_FALSE(c.moe->sparse(0));
  EXPECT_TRUE(c.moe->sparse(1));
  json j = deepseek_json();
  j["rope_interleave"] = false;
  j["q_lora_rank"] = nullptr;
  const ModelConfig d = parse_hf_config(j.dump(), "config.json");
  EXPECT_EQ(d.rope_style, RopeStyle::kNeox);
  EXPECT_EQ(d.mla->q_lora_rank, 0);
  j = deepseek_json();
  j["model_type"] = "kimi_k2";  // Kimi K2: DeepseekV3ForCausalLM by another name
  const ModelConfig k = parse_hf_config(j.dump(), "config.json");
  EXPECT_EQ(k.arch, Arch::kDeepseekV3);
  EXPECT_EQ(k.arch_name, "kimi_k2");
  EXPECT_EQ(kv_values_per_token_layer(k), 40);
}

TEST(MlaConfig, ParsesGlm5IndexerAndSharedSelections) {
  const ModelConfig c = parse_hf_config(glm5_json().dump(), "config.json");
  EXPECT_EQ(c.arch, Arch::kGlmMoeDsa);
  ASSERT_TRUE(c.mla && c.mla->dsa());
  EXPECT_EQ(c.mla->index_topk, 8);
  EXPECT_EQ(kv_values_per_token_layer(c), 32 + 8 + 16);  // the indexer's key too
  EXPECT_FALSE(c.mla->shared_selection(0));
  EXPECT_TRUE(c.mla->shared_selection(1));
  EXPECT_FALSE(c.mla->shared_selection(2));
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  json j = glm5_json();  // GLM-5.2's schedule by frequency and offset instead
  j.erase("indexer_types");
  j["index_topk_freq"] = 2;
  j["index_skip_topk_offset"] = 1;
  const ModelConfig d = parse_hf_config(j.dump(), "config.json");
  EXPECT_FALSE(d.mla->shared_selection(0));
  EXPECT_TRUE(d.mla->shared_selection(1));
  EXPECT_FALSE(d.mla->shared_selection(2));
}

TEST(MlaConfig, BadFieldsAreNamed) {
  const test::BadField deepseek[] = {
      {"kv_lora_rank", 0, ErrorCode::kFormat, "kv_lora_rank"},
      {"qk_rope_head_dim", 0, ErrorCode::kFormat, "qk_rope_head_dim"},
      {"v_head_dim", "x", ErrorCode::kFormat, "v_head_dim"},
      {"q_lora_rank", -1, ErrorCode::kFormat, "q_lora_rank"},
      {"rope_interleave", 3, ErrorCode::kFormat, "rope_interleave"},
  };
  test::expect_bad_fields(deepseek_json(), deepseek);
  const test::BadField glm[] = {
      {"indexer_types", json{"full", "sparse", "full"}, ErrorCode::kFormat, "\"sparse\""},
      {"indexer_types", json{"full", "shared"}, ErrorCode::kFormat, "indexer_types"},
      {"indexer_types", json{"shared", "full", "full"}, ErrorCode::kFormat, "first layer"},
      {"index_head_dim", 4, ErrorCode::kFormat, "index_head_dim"},
      {"index_topk", 0, ErrorCode::kFormat, "index_topk"},
      {"q_lora_rank", nullptr, ErrorCode::kFormat, "q_lora_rank"},
  };
  test::expect_bad_fields(glm5_json(), glm);
}

TEST(MlaConfig, LatentLayoutOfTheReleasedShapes) {
  MakeModelOptions o;
  o.arch = "deepseek_v3";
  o.shape = "deepseek-v3";
  const ModelConfig ds = make_model_config(o);
  EXPECT_EQ(kv_values_per_token_layer(ds), 576);  // 512 latent + 64 rope
  // What full multi-head K and V would take: 128 heads x (192 + 128).
  EXPECT_EQ(ds.num_heads * (ds.mla->qk_head_dim() + ds.mla->v_head_dim), 40960);
  EXPECT_EQ(ds.num_layers, 61);
  o.arch = "glm_moe_dsa";
  o.shape = "glm-5";
  const ModelConfig glm = make_model_config(o);
  EXPECT_EQ(kv_values_per_token_layer(glm), 704);  // + the 128-value index key
  EXPECT_EQ(glm.num_layers, 78);
  o.layers = 12;  // a reduced layer count for one GPU
  EXPECT_EQ(make_model_config(o).num_layers, 12);
  o.shape = "deepseek-v3";
  EXPECT_THROW(make_model_config(o), Error);
}

MakeModelOptions tiny(const std::string &arch, const std::filesystem::path &out) {
  MakeModelOptions o;
  o.arch = arch;
  o.shape = "tiny";
  o.dtype = DType::kBF16;
  o.out = out;
  o.threads = 1;
  return o;
}

TEST(MlaMakeModel, WritesTheReleasedNamesAndLoads) {
  for (const char *arch : {"deepseek_v3", "glm_moe_dsa"}) {
    test::TempDir dir;
    make_model(tiny(arch, dir.path()));
    const json cfg = json::parse(slurp(dir / "config.json"));
    EXPECT_EQ(cfg["model_type"], arch);
    auto w = ModelWeights::open(dir.path());
    const ModelConfig &c = w->config();
    ASSERT_TRUE(c.mla) << arch;
    EXPECT_TRUE(w->find("model.layers.1.self_attn.kv_b_proj.weight"));
    EXPECT_TRUE(w->find("model.layers.2.mlp.experts.7.down_proj.weight"));
    EXPECT_TRUE(w->find("model.layers.0.mlp.gate_proj.weight"));
    const bool glm = std::string(arch) == "glm_moe_dsa";
    EXPECT_EQ(w->find("model.layers.0.self_attn.indexer.wk.weight") != nullptr, glm);
    EXPECT_FALSE(w->find("model.layers.1.self_attn.indexer.wk.weight"));  // shared or none
  }
}

TEST(MlaCheckpoint, MissingIndexerTensorOrWrongRankIsNamed) {
  {
    test::TempDir dir;
    make_model(tiny("glm_moe_dsa", dir.path()));
    rename_tensor(dir / "model.safetensors", "model.layers.2.self_attn.indexer.wk.weight",
                  "model.layers.2.self_attn.indexer.wk.weighX");
    const std::string e = open_error(dir.path());
    EXPECT_NE(e.find("missing tensor model.layers.2.self_attn.indexer.wk.weight"),
              std::string::npos)
        << e;
  }
  {
    test::TempDir dir;
    make_model(tiny("deepseek_v3", dir.path()));
    json cfg = json::parse(slurp(dir / "config.json"));
    cfg["kv_lora_rank"] = 40;  // the checkpoint's latent is 32 wide
    spit(dir / "config.json", cfg.dump());
    const std::string e = open_error(dir.path());
    EXPECT_NE(e.find("model.layers.0.self_attn.kv_a_proj_with_mqa.weight: shape [40, 64], the "
                     "config implies [48, 64]"),
              std::string::npos)
        << e;
  }
}

// llama.cpp's deepseek2: make-model writes one, and its config reads back as the
// safetensors one does (per-head sizes, ranks, yarn's log multiplier, the MoE keys).
TEST(MlaGguf, Deepseek2ReadsBackAsTheSafetensorsConfig) {
  test::TempDir st, gg;
  MakeModelOptions o = tiny("deepseek_v3", st.path());
  o.dtype = DType::kF32;
  make_model(o);
  o.gguf = true;
  o.out = gg / "model.gguf";
  make_model(o);
  auto a = ModelWeights::open(st.path());
  auto b = ModelWeights::open(gg / "model.gguf");
  const ModelConfig &x = a->config(), &y = b->config();
  EXPECT_EQ(y.arch, Arch::kDeepseekV3);
  EXPECT_EQ(y.arch_name, "deepseek2");
  ASSERT_TRUE(y.mla && y.moe);
  EXPECT_EQ(y.kv_layout, KvLayout::kLatent);
  EXPECT_EQ(y.head_dim, x.head_dim);
  EXPECT_EQ(y.num_kv_heads, x.num_heads);
  EXPECT_EQ(y.rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(y.mla->q_lora_rank, x.mla->q_lora_rank);
  EXPECT_EQ(y.mla->kv_lora_rank, x.mla->kv_lora_rank);
  EXPECT_EQ(y.mla->qk_nope_head_dim, x.mla->qk_nope_head_dim);
  EXPECT_EQ(y.mla->qk_rope_head_dim, x.mla->qk_rope_head_dim);
  EXPECT_EQ(y.mla->v_head_dim, x.mla->v_head_dim);
  EXPECT_NEAR(y.mla->softmax_scale, x.mla->softmax_scale, 1e-12);
  EXPECT_EQ(y.moe->sparse_layers, x.moe->sparse_layers);
  EXPECT_EQ(y.moe->n_group, x.moe->n_group);
  EXPECT_EQ(y.moe->shared_intermediate, x.moe->shared_intermediate);
  EXPECT_FLOAT_EQ(static_cast<float>(y.moe->routed_scaling_factor),
                  static_cast<float>(x.moe->routed_scaling_factor));
  EXPECT_TRUE(b->find("model.layers.1.self_attn.kv_b_proj.weight"));
  EXPECT_TRUE(b->find("model.layers.2.mlp.experts.7.down_proj.weight"));
  EXPECT_TRUE(b->find("model.layers.2.mlp.gate.e_score_correction_bias"));
  EXPECT_TRUE(b->find("model.layers.2.mlp.shared_experts.up_proj.weight"));
  o.arch = "glm_moe_dsa";  // llama.cpp has no GLM-5 GGUF yet: refused, naming the rule
  o.out = gg / "glm.gguf";
  EXPECT_THROW(make_model(o), Error);
}

}  // namespace
}  // namespace keel
