#include "formats/model_weights.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "support/paths.h"

namespace keel {
namespace {

TEST(ModelWeights, NameMappingRoundTrips) {
  EXPECT_EQ(ModelWeights::hf_name_from_gguf("blk.12.attn_q.weight"),
            "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(ModelWeights::hf_name_from_gguf("blk.0.ffn_norm.weight"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(ModelWeights::hf_name_from_gguf("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(ModelWeights::hf_name_from_gguf("output.weight"), "lm_head.weight");
  EXPECT_EQ(ModelWeights::hf_name_from_gguf("blk.x.attn_q.weight"), "blk.x.attn_q.weight");
  EXPECT_EQ(ModelWeights::hf_name_from_gguf("rope_freqs.weight"), "rope_freqs.weight");
  for (const char *hf :
       {"model.layers.3.self_attn.k_norm.weight", "model.layers.7.mlp.down_proj.weight",
        "model.layers.1.self_attn.v_proj.bias", "model.norm.weight"})
    EXPECT_EQ(ModelWeights::hf_name_from_gguf(ModelWeights::gguf_name_from_hf(hf)), hf);
}

TEST(ModelWeights, OpensCommittedHfFixtures) {
  const auto models = test::fixtures_dir() / "models";
  if (!std::filesystem::exists(models)) GTEST_SKIP() << "no tests/fixtures/models";
  int n = 0;
  for (const auto &e : std::filesystem::directory_iterator(models)) {
    if (!std::filesystem::exists(e.path() / "config.json")) continue;
    SCOPED_TRACE(e.path().string());
    auto w = ModelWeights::open(e.path());
    const auto &c = w->config();
    EXPECT_EQ(w->format(), ModelWeights::Format::kSafetensors);
    EXPECT_EQ(w->tokenizer_path(), e.path());
    const auto &emb = w->get("model.embed_tokens.weight");
    EXPECT_EQ(emb.shape, (std::vector<std::int64_t>{c.vocab_size, c.hidden_size}));
    EXPECT_EQ(w->get("lm_head.weight").data == emb.data, c.tie_word_embeddings);
    EXPECT_EQ(w->find("model.layers.0.self_attn.q_norm.weight") != nullptr, c.qk_norm);
    try {
      w->get("model.layers.99.mlp.up_proj.weight");
      FAIL();
    } catch (const Error &err) {
      EXPECT_EQ(err.code(), ErrorCode::kNotFound);
      EXPECT_NE(std::string(err.what()).find("model.layers.99.mlp.up_proj.weight"),
                std::string::npos);
    }
    EXPECT_GT(w->total_bytes(), 0u);
    ++n;
  }
  EXPECT_GT(n, 0);
}

TEST(ModelWeights, MissingPathIsNotFound) {
  try {
    ModelWeights::open("/nonexistent/model");
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

}  // namespace
}  // namespace keel
