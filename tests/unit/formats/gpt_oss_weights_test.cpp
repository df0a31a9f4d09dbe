// gpt-oss checkpoints in their released layout (written by `keel make-model --arch gpt_oss`):
// the loader exposes the fused, interleaved experts as per-expert [out, in] tensors whose
// values are the file's, bf16 and MXFP4 alike; bad checkpoints get errors naming the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "formats/make_model.h"
#include "formats/model_weights.h"
#include "formats/mxfp4.h"
#include "formats/safetensors.h"
#include "temp_dir.h"

namespace keel {
namespace {

using nlohmann::json;

std::string slurp(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void spit(const std::filesystem::path &p, const std::string &s) {
  std::ofstream(p, std::ios::binary) << s;
}

MakeModelOptions tiny_gpt_oss(const std::filesystem::path &out, DType dtype) {
  MakeModelOptions o;
  o.arch = "gpt_oss";
  o.shape = "tiny";
  o.dtype = dtype;
  o.seed = 7;
  o.out = out;
  o.threads = 2;
  return o;
}

// Rewrites a safetensors file's JSON header through `edit` (the data stays in place).
template <class Edit>
void edit_header(const std::filesystem::path &file, Edit edit) {
  const std::string bytes = slurp(file);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  json h = json::parse(bytes.substr(8, n));
  edit(h);
  const std::string text = h.dump();
  const std::uint64_t m = text.size();
  std::string out(reinterpret_cast<const char *>(&m), 8);
  spit(file, out + text + bytes.substr(8 + n));
}

std::string open_error(const std::filesystem::path &dir) {
  try {
    ModelWeights::open(dir);
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat) << e.what();
    return e.what();
  }
  return "no error";
}

std::uint16_t bf16_at(const std::byte *data, std::int64_t i) {
  std::uint16_t v;
  std::memcpy(&v, data + 2 * i, 2);
  return v;
}

TEST(GptOssMakeModel, WritesTheReleasedConfig) {
  test::TempDir dir;
  make_model(tiny_gpt_oss(dir.path(), DType::kBF16));
  const json cfg = json::parse(slurp(dir / "config.json"));
  EXPECT_EQ(cfg["model_type"], "gpt_oss");
  EXPECT_EQ(cfg["architectures"][0], "GptOssForCausalLM");
  EXPECT_EQ(cfg["num_local_experts"], 8);
  EXPECT_EQ(cfg["experts_per_token"], 2);
  EXPECT_EQ(cfg["layer_types"], json({"sliding_attention", "full_attention"}));
  EXPECT_EQ(cfg["sliding_window"], 16);
  EXPECT_EQ(cfg["swiglu_limit"], 7.0);
  EXPECT_EQ(cfg["attention_bias"], true);
  EXPECT_EQ(cfg["rope_scaling"]["rope_type"], "yarn");
  EXPECT_EQ(cfg["rope_scaling"]["truncate"], false);
  EXPECT_EQ(cfg["rope_scaling"]["factor"], 32.0);

  MakeModelOptions o;
  o.arch = "gpt_oss";
  o.shape = "gpt-oss-20b";
  ModelConfig c = make_model_config(o);
  EXPECT_EQ(c.num_layers, 24);
  EXPECT_EQ(c.hidden_size, 2880);
  EXPECT_EQ(c.num_heads * c.head_dim, 4096);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.moe->num_experts, 32);
  EXPECT_EQ(c.moe->top_k, 4);
  EXPECT_EQ(c.moe->expert_intermediate, 2880);
  EXPECT_EQ(c.vocab_size, 201088);
  EXPECT_EQ(c.window_of(0), std::optional<std::int64_t>(128));
  EXPECT_EQ(c.window_of(23), std::nullopt);
  o.shape = "gpt-oss-120b";
  c = make_model_config(o);
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_EQ(c.moe->num_experts, 128);
  o.dtype = DType::kF8_E4M3;
  o.out = dir / "fp8";
  EXPECT_THROW(make_model(o), Error);
}

TEST(GptOssWeights, Bf16ExpertsAreDeinterleavedAndTransposed) {
  test::TempDir dir;
  make_model(tiny_gpt_oss(dir.path(), DType::kBF16));
  auto raw = SafetensorsModel::open(dir.path());
  // The file holds the fused layout only.
  ASSERT_TRUE(raw->find("model.layers.1.mlp.experts.gate_up_proj"));
  EXPECT_FALSE(raw->find("model.layers.1.mlp.experts.0.gate_proj.weight"));
  auto w = ModelWeights::open(dir.path());
  const ModelConfig &c = w->config();
  const std::int64_t E = 8, I = 64, H = 64;
  ASSERT_EQ(c.moe->expert_intermediate, I);
  for (std::int64_t l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.";
    const SafetensorsTensor *gu = raw->find(p + "experts.gate_up_proj");        // [E, H, 2I]
    const SafetensorsTensor *dn = raw->find(p + "experts.down_proj");           // [E, I, H]
    const SafetensorsTensor *gub = raw->find(p + "experts.gate_up_proj_bias");  // [E, 2I]
    const SafetensorsTensor *dnb = raw->find(p + "experts.down_proj_bias");     // [E, H]
    ASSERT_TRUE(gu && dn && gub && dnb);
    EXPECT_EQ(gu->shape, (std::vector<std::int64_t>{E, H, 2 * I}));
    EXPECT_EQ(dn->shape, (std::vector<std::int64_t>{E, I, H}));
    for (std::int64_t e : {std::int64_t{0}, std::int64_t{5}}) {
      const MoeConfig &m = *c.moe;
      const TensorView &gate = w->get(moe_expert_name(m, l, e, ExpertMatrix::kGate));
      const TensorView &up = w->get(moe_expert_name(m, l, e, ExpertMatrix::kUp));
      const TensorView &down = w->get(moe_expert_name(m, l, e, ExpertMatrix::kDown));
      ASSERT_EQ(gate.shape, (std::vector<std::int64_t>{I, H}));
      ASSERT_EQ(down.shape, (std::vector<std::int64_t>{H, I}));
      EXPECT_EQ(gate.dtype, DType::kBF16);
      for (std::int64_t i = 0; i < I; ++i)
        for (std::int64_t k = 0; k < H; ++k) {
          ASSERT_EQ(bf16_at(gate.data, i * H + k), bf16_at(gu->data, (e * H + k) * 2 * I + 2 * i));
          ASSERT_EQ(bf16_at(up.data, i * H + k),
                    bf16_at(gu->data, (e * H + k) * 2 * I + 2 * i + 1));
          ASSERT_EQ(bf16_at(down.data, k * I + i), bf16_at(dn->data, (e * I + i) * H + k));
        }
      const TensorView &gb = w->get(moe_expert_bias_name(m, l, e, ExpertMatrix::kGate));
      const TensorView &ub = w->get(moe_expert_bias_name(m, l, e, ExpertMatrix::kUp));
      const TensorView &db = w->get(moe_expert_bias_name(m, l, e, ExpertMatrix::kDown));
      ASSERT_EQ(gb.shape, (std::vector<std::int64_t>{I}));
      ASSERT_EQ(db.shape, (std::vector<std::int64_t>{H}));
      for (std::int64_t i = 0; i < I; ++i) {
        EXPECT_EQ(bf16_at(gb.data, i), bf16_at(gub->data, e * 2 * I + 2 * i));
        EXPECT_EQ(bf16_at(ub.data, i), bf16_at(gub->data, e * 2 * I + 2 * i + 1));
      }
      for (std::int64_t k = 0; k < H; ++k)
        EXPECT_EQ(bf16_at(db.data, k), bf16_at(dnb->data, e * H + k));
    }
    // The router, renamed (the same bytes).
    const TensorView &router = w->get(moe_router_name(*c.moe, l));
    const TensorView &rbias = w->get(moe_router_logit_bias_name(*c.moe, l));
    EXPECT_EQ(router.shape, (std::vector<std::int64_t>{E, H}));
    EXPECT_EQ(std::memcmp(router.data, raw->find(p + "router.weight")->data, router.nbytes), 0);
    EXPECT_EQ(std::memcmp(rbias.data, raw->find(p + "router.bias")->data, rbias.nbytes), 0);
    EXPECT_EQ(w->get(attention_sinks_name(l)).shape, (std::vector<std::int64_t>{4}));
  }
}

TEST(GptOssWeights, Mxfp4ExpertsAreSplitByWholeRows) {
  test::TempDir dir;
  make_model(tiny_gpt_oss(dir.path(), DType::kMXFP4));
  auto raw = SafetensorsModel::open(dir.path());
  auto w = ModelWeights::open(dir.path());
  const MoeConfig &m = *w->config().moe;
  const std::int64_t E = 8, I = 64, H = 64;
  const std::string p = "model.layers.1.mlp.experts.";
  const SafetensorsTensor *b = raw->find(p + "gate_up_proj_blocks");  // [E, 2I, H / 32, 16]
  const SafetensorsTensor *s = raw->find(p + "gate_up_proj_scales");  // [E, 2I, H / 32]
  const SafetensorsTensor *db = raw->find(p + "down_proj_blocks");    // [E, H, I / 32, 16]
  const SafetensorsTensor *ds = raw->find(p + "down_proj_scales");
  ASSERT_TRUE(b && s && db && ds);
  EXPECT_EQ(b->shape, (std::vector<std::int64_t>{E, 2 * I, H / 32, 16}));
  const std::int64_t row_blocks = H / 32, row_bytes = row_blocks * kMxfp4BlockBytes;
  std::vector<std::byte> want(static_cast<std::size_t>(row_bytes));
  for (std::int64_t e = 0; e < E; ++e) {
    const TensorView &gate = w->get(moe_expert_name(m, 1, e, ExpertMatrix::kGate));
    const TensorView &up = w->get(moe_expert_name(m, 1, e, ExpertMatrix::kUp));
    ASSERT_EQ(gate.dtype, DType::kMXFP4);
    ASSERT_EQ(gate.shape, (std::vector<std::int64_t>{I, H}));
    for (std::int64_t i = 0; i < I; ++i)
      for (int j = 0; j < 2; ++j) {
        const std::int64_t row = e * 2 * I + 2 * i + j;
        repack_gpt_oss_mxfp4(
            reinterpret_cast<const std::uint8_t *>(b->data) + row * row_blocks * 16,
            reinterpret_cast<const std::uint8_t *>(s->data) + row * row_blocks, want.data(),
            row_blocks);
        const TensorView &t = j == 0 ? gate : up;
        ASSERT_EQ(std::memcmp(t.data + i * row_bytes, want.data(), row_bytes), 0)
            << "expert " << e << " row " << i << (j ? " up" : " gate");
      }
    const TensorView &down = w->get(moe_expert_name(m, 1, e, ExpertMatrix::kDown));
    ASSERT_EQ(down.shape, (std::vector<std::int64_t>{H, I}));
    const std::int64_t down_blocks = H * I / 32;
    std::vector<std::byte> d(static_cast<std::size_t>(down_blocks * kMxfp4BlockBytes));
    repack_gpt_oss_mxfp4(reinterpret_cast<const std::uint8_t *>(db->data) + e * down_blocks * 16,
                         reinterpret_cast<const std::uint8_t *>(ds->data) + e * down_blocks,
                         d.data(), down_blocks);
    EXPECT_EQ(std::memcmp(down.data, d.data(), d.size()), 0) << "expert " << e;
    EXPECT_EQ(w->get(moe_expert_bias_name(m, 1, e, ExpertMatrix::kGate)).dtype, DType::kBF16);
  }
  EXPECT_EQ(w->get(moe_router_name(m, 1)).dtype, DType::kBF16);
  EXPECT_EQ(w->linear_dtypes(), "bf16+mxfp4");
}

TEST(GptOssCheckpoint, MissingTensorsAreNamed) {
  struct Case {
    const char *stored, *message;
  };
  const Case cases[] = {
      {"model.layers.1.self_attn.sinks", "missing tensor model.layers.1.self_attn.sinks"},
      {"model.layers.0.mlp.router.bias",
       "missing tensor model.layers.0.mlp.gate.bias (stored in model.layers.0.mlp.router.bias)"},
      {"model.layers.1.mlp.experts.down_proj_bias",
       "missing tensor model.layers.1.mlp.experts.0.down_proj.bias (stored in "
       "model.layers.1.mlp.experts.down_proj_bias)"},
      {"model.layers.0.mlp.experts.gate_up_proj",
       "(stored in model.layers.0.mlp.experts.gate_up_proj)"},
  };
  for (const Case &k : cases) {
    test::TempDir dir;
    make_model(tiny_gpt_oss(dir.path(), DType::kBF16));
    edit_header(dir / "model.safetensors", [&](json &h) {
      ASSERT_TRUE(h.contains(k.stored)) << k.stored;
      h[std::string(k.stored) + "_renamed"] = h[k.stored];
      h.erase(k.stored);
    });
    EXPECT_NE(open_error(dir.path()).find(k.message), std::string::npos)
        << k.stored << ": " << open_error(dir.path());
  }
}

TEST(GptOssCheckpoint, MisShapedTensorsAreNamed) {
  struct Case {
    DType dtype;
    std::vector<const char *> names;
    std::vector<std::vector<std::int64_t>> shapes;
    const char *message;
  };
  const Case cases[] = {
      // Fewer experts than num_local_experts (the same bytes, reshaped).
      {DType::kBF16,
       {"model.layers.0.mlp.experts.gate_up_proj"},
       {{4, 128, 128}},
       "model.layers.0.mlp.experts.gate_up_proj: shape [4, 128, 128], expected [8, 64, 128]"},
      // A router of another width.
      {DType::kBF16,
       {"model.layers.1.mlp.router.weight"},
       {{4, 128}},
       "model.layers.1.mlp.router.weight: shape [4, 128], expected [8, 64]"},
      {DType::kBF16,
       {"model.layers.1.mlp.experts.down_proj_bias"},
       {{4, 128}},
       "model.layers.1.mlp.experts.down_proj_bias: shape [4, 128], expected [8, 64]"},
      {DType::kBF16,
       {"model.layers.0.self_attn.sinks"},
       {{2, 2}},
       "model.layers.0.self_attn.sinks: shape [2, 2], the config implies [4]"},
      {DType::kMXFP4,
       {"model.layers.1.mlp.experts.down_proj_blocks",
        "model.layers.1.mlp.experts.down_proj_scales"},
       {{4, 128, 2, 16}, {4, 128, 2}},
       "model.layers.1.mlp.experts.down_proj: shape [4, 128, 64], expected [8, 64, 64]"},
  };
  for (const Case &k : cases) {
    test::TempDir dir;
    make_model(tiny_gpt_oss(dir.path(), k.dtype));
    edit_header(dir / "model.safetensors", [&](json &h) {
      for (std::size_t i = 0; i < k.names.size(); ++i) h[k.names[i]]["shape"] = k.shapes[i];
    });
    const std::string what = open_error(dir.path());
    EXPECT_NE(what.find(k.message), std::string::npos) << what;
  }
}

TEST(GptOssCheckpoint, ConfigWithMoreExpertsThanStoredIsRefused) {
  test::TempDir dir;
  make_model(tiny_gpt_oss(dir.path(), DType::kBF16));
  json cfg = json::parse(slurp(dir / "config.json"));
  cfg["num_local_experts"] = 16;
  spit(dir / "config.json", cfg.dump());
  const std::string what = open_error(dir.path());
  EXPECT_NE(what.find("expected [16,"), std::string::npos) << what;
  EXPECT_NE(what.find("model.layers.0.mlp."), std::string::npos) << what;
}

}  // namespace
}  // namespace keel
