// glm_moe_dsa (DeepSeek Sparse Attention over the latent cache: exec/arch/dsa_indexer.h on
// the CPU, k_dsa_indexer.h + cuda_runner_dsa.cpp on CUDA) on the CUDA runner against the CPU
// runner on make_model's tiny shape (3 layers: "full", "shared", "full"; index_topk 16, so
// every prompt over 16 tokens selects), with the bounds of moe_vs_cpu.h:
// - alone (a 29-token prefill, then decode) and batched with 31 others of other lengths;
// - the same with a scores scratch of one row, so every step is scored one query a pass;
// - the same with prefills in chunks of 8 rows on the split kernel, and on the simple kernel;
// - a 45-token prompt prefilled in chunks after a cached 32-token prefix, then decode; the
//   prefix moved through copy_block and through save_block / load_block into a second
//   runner gives the same logits;
// - the latent rows themselves: the CUDA block image against the CPU's, value by value
//   ([c | k_rope | index key], the index key zero in the "shared" layer on both);
// - a missing indexer tensor refused with Error(kFormat) naming it.
// Each comparison prints its errors, so one device run tells what is off.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "core/half.h"
#include "cuda_test_util.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/cuda/cuda_model_runner.h"
#include "formats/make_model.h"
#include "mla_vs_cpu.h"
#include "model/model_harness.h"
#include "moe_vs_cpu.h"
#include "support/rewrite_safetensors.h"

namespace keel::cuda {
namespace {

using keel::test::BlockHandout;
using keel::test::PagedSeq;
using keel::test::run_step;
using Logits = SequenceSlice::Logits;
using mla_vs_cpu::kBlocks;
using mla_vs_cpu::kBs;
CudaRunnerOptions dsa_options() { return mla_vs_cpu::options(); }

// A tiny glm_moe_dsa written by make_model, removed when the test ends.
class CudaDsaVsCpu : public mla_vs_cpu::Fixture {
 protected:
  CudaDsaVsCpu() : Fixture("glm_moe_dsa") {}
};

TEST_F(CudaDsaVsCpu, TinyConfigSelectsAndSharesAndTheRowHoldsTheIndexKey) {
  const MlaConfig &m = *gpu_->config().mla;
  ASSERT_TRUE(m.dsa());
  EXPECT_EQ(m.index_topk, 16);
  EXPECT_FALSE(m.shared_selection(0));
  EXPECT_TRUE(m.shared_selection(1));
  EXPECT_EQ(gpu_->kv_store().layout().planes, 1);
  EXPECT_EQ(gpu_->kv_store().layout().slot_elems(),
            m.kv_lora_rank + m.qk_rope_head_dim + m.index_head_dim);
  EXPECT_EQ(gpu_->kv_store().layout().slot_elems(), kv_values_per_token_layer(gpu_->config()));
}

TEST_F(CudaDsaVsCpu, LogprobsAndGreedyAloneAndBatchedWith31) {
  moe_vs_cpu::RowErrors e;
  moe_vs_cpu::alone_and_batched(*gpu_, *cpu_, V_, kBlocks, e);
  if (HasFatalFailure()) return;
  expect_row_bounds(e, 150, "alone and batched");
  EXPECT_GT(gpu_->graphs_captured(), 0u);  // the decode steps replayed CUDA graphs
}

// Scores scratch of one row: every query its own pass (the prefill chunking of long
// prompts, at a size where the tiny model shows it).
TEST_F(CudaDsaVsCpu, OneQueryAScoringPass) {
  CudaRunnerOptions o = dsa_options();
  o.dsa_score_bytes = 1;  // rounds up to one row of max_model_len floats
  auto gpu = CudaModelRunner::open(dir_, *cctx_, o);
  moe_vs_cpu::RowErrors e;
  moe_vs_cpu::alone_and_batched(*gpu, *cpu_, V_, kBlocks, e);
  if (HasFatalFailure()) return;
  expect_row_bounds(e, 150, "one query a scoring pass");
}

// mla_vs_cpu.h: a prefill's selections [T, topk] are read a chunk of rows at a time.
TEST_F(CudaDsaVsCpu, PrefillInSplitChunksAndOnTheSimpleKernel) {
  prefill_in_split_chunks_and_on_the_simple_kernel(dsa_options());
}

// The latent rows of a 40-token prompt (3 blocks) as each runner stores them: the CPU's f32
// block image [layers][block][row], the CUDA's bf16 one in the same order. c and k_rope as
// the deepseek_v3 rows; the index key (LayerNorm, rope) of the selecting layers within bf16
// rounding of the CPU's, and zero in the "shared" layer on both.
TEST_F(CudaDsaVsCpu, LatentRowsMatchTheCpuStoreValueByValue) {
  constexpr int kLen = 40;
  const MlaConfig &m = *gpu_->config().mla;
  const int W = static_cast<int>(kv_values_per_token_layer(gpu_->config()));
  const int key_at = static_cast<int>(m.kv_lora_rank + m.qk_rope_head_dim);
  const int layers = static_cast<int>(gpu_->config().num_layers);
  BlockHandout gb(kBlocks, 3), cb(kBlocks, 4);
  PagedSeq g, c;
  g.tokens = c.tokens = moe_vs_cpu::pseudo_prompt(9, kLen, V_);
  run_step(*gpu_, gb, {{&g, kLen, Logits::kLast}});
  run_step(*cpu_, cb, {{&c, kLen, Logits::kLast}});
  ASSERT_EQ(g.blocks.size(), c.blocks.size());
  ASSERT_EQ(cpu_->kv().block_bytes(), static_cast<std::size_t>(layers) * kBs * W * 4);
  ASSERT_EQ(gpu_->kv().block_bytes(), static_cast<std::size_t>(layers) * kBs * W * 2);
  std::vector<std::byte> gi(gpu_->kv().block_bytes()), ci(cpu_->kv().block_bytes());
  // Per layer and part (0 c, 1 k_rope, 2 index key): worst |gpu - cpu| / (max |cpu| of the part).
  std::vector<double> worst(static_cast<std::size_t>(layers) * 3, 0.0),
      scale(static_cast<std::size_t>(layers) * 3, 0.0);
  for (std::size_t b = 0; b < g.blocks.size(); ++b) {
    gpu_->kv().save_block(g.blocks[b], gi);
    cpu_->kv().save_block(c.blocks[b], ci);
    for (int l = 0; l < layers; ++l)
      for (int slot = 0; slot < kBs; ++slot) {
        if (static_cast<int>(b) * kBs + slot >= kLen) continue;
        for (int i = 0; i < W; ++i) {
          const std::size_t at = (static_cast<std::size_t>(l) * kBs + slot) * W + i;
          std::uint16_t hb;
          std::memcpy(&hb, gi.data() + at * 2, 2);
          float cf;
          std::memcpy(&cf, ci.data() + at * 4, 4);
          const float gf = bf16_to_f32(hb);
          const int part = i < m.kv_lora_rank ? 0 : (i < key_at ? 1 : 2);
          const std::size_t k = static_cast<std::size_t>(l) * 3 + part;
          worst[k] = std::max(worst[k], std::abs(double(gf) - cf));
          scale[k] = std::max(scale[k], std::abs(double(cf)));
          if (part == 2 && m.shared_selection(l)) {
            EXPECT_EQ(gf, 0.0f) << "layer " << l << " slot " << slot << " value " << i;
            EXPECT_EQ(cf, 0.0f) << "layer " << l << " slot " << slot << " value " << i;
          }
        }
      }
  }
  const char *names[] = {"c", "k_rope", "index key"};
  for (int l = 0; l < layers; ++l)
    for (int part = 0; part < 3; ++part) {
      const std::size_t k = static_cast<std::size_t>(l) * 3 + part;
      const double rel = worst[k] / std::max(scale[k], 1e-30);
      std::printf("latent rows, layer %d %s: max |gpu - cpu| %.3g (max |cpu| %.3g, rel %.3g)\n", l,
                  names[part], worst[k], scale[k], rel);
      if (scale[k] > 0) {
        EXPECT_LT(rel, 2e-2) << "layer " << l << " " << names[part];
      }
    }
}

// As CudaMlaVsCpu's (mla_vs_cpu.h): the first 32 tokens of a 45-token prompt cached, the
// rest in chunks of 5 (every row's logits), then 3 decode steps, on the CPU and three ways on
// the GPU.
TEST_F(CudaDsaVsCpu, ChunkedPrefillAfterCachedPrefixCopiedAndRestored) {
  chunked_prefill_after_cached_prefix_copied_and_restored();
}

TEST_F(CudaDsaVsCpu, MissingIndexerTensorIsRefusedByName) {
  const std::string gone = "model.layers.2.self_attn.indexer.weights_proj.weight";
  keel::test::rewrite_safetensors(
      dir_ / "model.safetensors",
      [&](const std::string &name, keel::test::StoredTensor &) { return name != gone; });
  try {
    auto r = CudaModelRunner::open(dir_, *cctx_, dsa_options());
    FAIL() << "loaded without " << gone;
  } catch (const Error &err) {
    EXPECT_EQ(err.code(), ErrorCode::kFormat) << err.what();
    EXPECT_NE(std::string(err.what()).find(gone), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace keel::cuda
