// The attention-path plan's split-K per window (host logic, no device needed): a layer
// with a sliding window splits over the keys it sees, not the context, so gpt-oss's
// alternating layers each get a factor sized for their own keys.
#include <gtest/gtest.h>

#include "exec/cuda/cuda_attention_plan.h"

namespace keel::cuda {
namespace {

AttentionPathConfig h200_like(std::int64_t window, std::int64_t narrow) {
  AttentionPathConfig c;
  c.decode_kernel = true;
  c.tile_q = 4;
  c.num_sms = 132;
  c.partial_entries = 8 * 132;
  c.num_kv_heads = 8;
  c.window = window;
  c.narrow_window = narrow;
  return c;
}

TEST(CudaAttentionPlan, NarrowWindowLayersSplitOverTheirOwnKeys) {
  AttentionPlan plan(h200_like(0, 128));
  plan.add_sequence(0, 1, 4000, 0);  // one decode token at position 4000
  for (const bool graph : {false, true}) {
    const int wide = plan.splits_single(graph), narrow = plan.splits_single(graph, 128);
    EXPECT_EQ(wide, plan.splits_single(graph, 0)) << "the default is the config's window";
    // 128 visible keys: at most one split per 64 of them.
    EXPECT_GE(narrow, 1);
    EXPECT_LE(narrow, 2);
    EXPECT_GT(wide, 4 * narrow) << "4,001 keys split further than 128";
  }
}

TEST(CudaAttentionPlan, ShortContextsSplitAlikeWhateverTheWindow) {
  AttentionPlan plan(h200_like(0, 128));
  plan.add_sequence(0, 1, 100, 0);  // 101 keys: inside the window either way
  EXPECT_EQ(plan.splits_single(false, 128), plan.splits_single(false, 0));
  EXPECT_EQ(plan.splits_single(true, 128), plan.splits_single(true, 0));
}

// MLA's split path: a batch-1 decode at 128k fills the GPU over 8 head groups, a graph's
// factor is a power of two, DSA's index_topk caps the keys, a full grid does not split, and
// the partial scratch bounds rows x splits.
TEST(CudaAttentionPlan, LatentSplitsFillTheGpuWithinTheirBounds) {
  AttentionPathConfig c = h200_like(0, 0);
  c.decode_kernel = false;  // MLA: every tile is a general one
  AttentionPlan one(c);
  one.add_sequence(0, 1, 131071, 0);
  EXPECT_EQ(one.splits_latent(8, 0, 1, 256, false), 33);  // ceil(264 / 8)
  EXPECT_EQ(one.splits_latent(8, 0, 1, 256, true), 32);
  EXPECT_EQ(one.splits_latent(8, 2048, 1, 256, true), 16) << "2048 keys: 128 a split";
  EXPECT_EQ(one.splits_latent(8, 0, 1, 8, true), 8) << "the scratch's 8 partial rows";
  EXPECT_EQ(one.splits_latent(1, 0, 1, 256, false), 256);
  AttentionPlan many(c);
  for (int s = 0; s < 64; ++s) many.add_sequence(s, 1, 2047, 0);
  EXPECT_EQ(many.splits_latent(8, 0, 64, 256, true), 1) << "512 CTAs fill 132 SMs";
  AttentionPlan short_ctx(c);
  short_ctx.add_sequence(0, 1, 9, 0);
  EXPECT_EQ(short_ctx.splits_latent(8, 0, 1, 256, false), 1) << "10 keys";
}

}  // namespace
}  // namespace keel::cuda
