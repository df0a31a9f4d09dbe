// The per-architecture layer plans both backends walk (exec/arch/layer_plan.h).
#include "exec/arch/layer_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace keel::arch {
namespace {

ModelConfig config(Arch arch, bool bias, bool qk_norm) {
  ModelConfig c;
  c.arch = arch;
  c.num_layers = 3;
  c.attention_bias = bias;
  c.qk_norm = qk_norm;
  return c;
}

std::vector<std::string> names(const LayerPlan &p) {
  std::vector<std::string> out;
  for (const LayerStep s : p.steps) out.emplace_back(layer_step_name(s));
  return out;
}

TEST(LayerPlan, LlamaIsPreNormAttentionThenSwigluMlp) {
  const std::vector<std::string> want = {
      "input_norm",   "qkv_proj",  "rope",         "kv_write", "attention", "o_proj",
      "residual_add", "post_norm", "gate_up_proj", "swiglu",   "down_proj", "residual_add"};
  EXPECT_EQ(names(layer_plan(config(Arch::kLlama, false, false), 0)), want);
  EXPECT_EQ(names(layer_plan(config(Arch::kMistral, false, false), 2)), want);
}

TEST(LayerPlan, QwenStepsFollowTheConfigFlags) {
  const LayerPlan qwen2 = layer_plan(config(Arch::kQwen2, true, false), 1);
  EXPECT_TRUE(qwen2.has(LayerStep::kQkvBias));
  EXPECT_FALSE(qwen2.has(LayerStep::kQkNorm));
  EXPECT_EQ(names(qwen2)[2], "qkv_bias");  // after the projection, before RoPE
  const LayerPlan qwen3 = layer_plan(config(Arch::kQwen3, false, true), 1);
  EXPECT_FALSE(qwen3.has(LayerStep::kQkvBias));
  EXPECT_EQ(names(qwen3)[2], "qk_norm");
  const LayerPlan both = layer_plan(config(Arch::kQwen3, true, true), 0);
  EXPECT_EQ(names(both)[2], "qkv_bias");
  EXPECT_EQ(names(both)[3], "qk_norm");
  EXPECT_EQ(names(both)[4], "rope");
}

TEST(LayerPlan, AnOProjBiasIsAddedRightAfterTheProjection) {
  ModelConfig c = config(Arch::kLlama, true, false);
  EXPECT_FALSE(layer_plan(c, 0).has(LayerStep::kOBias));
  c.attention_out_bias = true;
  const std::vector<std::string> n = names(layer_plan(c, 0));
  const auto at = std::find(n.begin(), n.end(), "o_proj");
  ASSERT_NE(at, n.end());
  EXPECT_EQ(*(at + 1), "o_bias");
  EXPECT_EQ(*(at + 2), "residual_add");
}

TEST(LayerPlan, RejectsALayerOutsideTheModel) {
  const ModelConfig c = config(Arch::kLlama, false, false);
  EXPECT_THROW(layer_plan(c, 3), Error);
  EXPECT_THROW(layer_plan(c, -1), Error);
}

}  // namespace
}  // namespace keel::arch
