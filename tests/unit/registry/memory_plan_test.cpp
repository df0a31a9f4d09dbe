// A model's memory plan before its engine starts (registry/memory_plan.h): the config
// read from an HF directory or a GGUF file (quantized weights counted as stored), the
// CPU pool from the config, the host tier in the total, the CUDA context cap.
#include "registry/memory_plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/error.h"
#include "formats/make_model.h"
#include "support/paths.h"

using namespace keel;
namespace fs = std::filesystem;

namespace {
const fs::path kGqa =
    test::fixtures_dir() / "models" / "llama_gqa_f32";  // 2 layers, 2 kv heads x 16
}

TEST(MemoryPlan, ReadsTheConfigAndSizesACpuBlock) {
  const ModelConfig c = read_model_config(kGqa);
  EXPECT_EQ(c.max_position_embeddings, 256);
  // 2 layers x K,V x 16 tokens x 2 kv heads x 16 dims x 4 bytes.
  EXPECT_EQ(cpu_block_bytes(c, 16), 2 * 2 * 16 * 2 * 16 * 4);
  EXPECT_EQ(weight_file_bytes(kGqa),
            static_cast<std::int64_t>(fs::file_size(kGqa / "model.safetensors")));
  EXPECT_THROW(read_model_config(test::fixtures_dir() / "no-such-model"), Error);
}

// Multi-head latent attention: a block holds the latent row, not K and V per head.
TEST(MemoryPlan, LatentBlocksOfTheReleasedMlaShapes) {
  MakeModelOptions o;
  o.arch = "deepseek_v3";
  o.shape = "deepseek-v3";
  const ModelConfig ds = make_model_config(o);
  EXPECT_EQ(cpu_block_bytes(ds, 16), std::int64_t{61} * 16 * 576 * 4);  // not 40,960 a token
  o.arch = "glm_moe_dsa";
  o.shape = "glm-5";
  o.layers = 12;
  EXPECT_EQ(cpu_block_bytes(make_model_config(o), 16), std::int64_t{12} * 16 * 704 * 4);
}

TEST(MemoryPlan, CpuDefaultIsTheMinimumForAShortContextAndThePartsAddUp) {
  const ModelConfig c = read_model_config(kGqa);
  MemoryPlanOptions o;
  o.host_tier_bytes = 1 << 20;
  o.mem_available = std::int64_t{8} << 30;
  const ModelMemoryPlan p = plan_model_memory(c, 1000, o);
  ASSERT_TRUE(p.known);
  EXPECT_TRUE(p.refusal.empty()) << p.refusal;
  EXPECT_EQ(p.kv_tokens, kHostMinDefaultTokens);  // 4 x 256 would be less
  EXPECT_EQ(p.kv_blocks, 1024);
  EXPECT_EQ(p.kv_bytes, 1024 * cpu_block_bytes(c, 16));
  EXPECT_EQ(p.total_bytes(), 1000 + p.kv_bytes + (1 << 20));
  EXPECT_EQ(p.context_length, 256);
  EXPECT_EQ(p.rule, "default minimum");
}

TEST(MemoryPlan, CpuOverridesAndMaxModelLen) {
  const ModelConfig c = read_model_config(kGqa);
  MemoryPlanOptions o;
  o.max_model_len = 100;
  o.kv.tokens = 40;  // 3 blocks: the context offered is what one sequence can hold
  const ModelMemoryPlan p = plan_model_memory(c, 0, o);
  EXPECT_EQ(p.kv_blocks, 3);
  EXPECT_EQ(p.model_context, 100);
  EXPECT_EQ(p.context_length, 48);
  EXPECT_EQ(p.rule, "--max-kv-tokens");
}

TEST(MemoryPlan, CpuBudgetShareTooSmallIsARefusalWithFigures) {
  const ModelConfig c = read_model_config(kGqa);
  MemoryPlanOptions o;
  o.budget_share = 5000;  // less than the weights
  const ModelMemoryPlan p = plan_model_memory(c, 4000, o);
  ASSERT_FALSE(p.refusal.empty());
  EXPECT_NE(p.refusal.find("(4000 bytes)"), std::string::npos) << p.refusal;
  EXPECT_NE(p.refusal.find("(5000 bytes)"), std::string::npos) << p.refusal;
}

TEST(MemoryPlan, CudaLeavesThePoolToTheEngineAndCapsTheContext) {
  ModelConfig c = read_model_config(kGqa);
  c.max_position_embeddings = 1 << 20;
  MemoryPlanOptions o;
  o.cuda = true;
  const ModelMemoryPlan p = plan_model_memory(c, 123, o);
  EXPECT_EQ(p.kv_bytes, 0);
  EXPECT_EQ(p.context_length, kCudaMaxContext);
  EXPECT_EQ(p.total_bytes(), 123);
}

TEST(MemoryPlan, GgufConfigAndQuantizedWeightsAsStored) {
  const fs::path file =
      fs::temp_directory_path() / ("keel-memory-plan-" + std::to_string(::getpid()) + ".gguf");
  MakeModelOptions mo;
  mo.gguf = true;
  mo.dtype = DType::kQ8_0;
  mo.out = file;
  mo.threads = 1;
  const MakeModelReport made = make_model(mo);
  const ModelConfig c = read_model_config(file);
  EXPECT_EQ(c.num_layers, made.config.num_layers);
  EXPECT_EQ(c.num_kv_heads, made.config.num_kv_heads);
  EXPECT_EQ(c.max_position_embeddings, made.config.max_position_embeddings);
  // The file as stored: q8_0 tensors, well under their f32 size.
  EXPECT_EQ(weight_file_bytes(file), static_cast<std::int64_t>(fs::file_size(file)));
  EXPECT_LT(weight_file_bytes(file), static_cast<std::int64_t>(made.parameters * 4 / 2));
  fs::remove(file);
}
