// Paged attention over a mixed ragged batch (prefill chunks with cached prefixes, decode
// tokens, a first token) against a float64 CPU reference, with and without split-K.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "cuda_test_util.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {
namespace {

using test::download;
using test::from_bf16;
using test::rel_err;
using test::to_bf16;
using test::upload;

struct Seq {
  int start_pos, num_tokens;
};

const std::vector<Seq> kMixed = {{20, 37}, {300, 1}, {0, 5}, {0, 1}, {1000, 1}, {7, 16}};
const std::vector<Seq> kDecode = {{300, 1}, {0, 1},    {1000, 1}, {31, 1},
                                  {32, 1},  {4095, 1}, {77, 1}};

// kernel 0: launch_paged_attention; 1: launch_decode_attention (every sequence must be
// one token); 2: launch_flash_attention (tensor cores, tiles of kFlashRows / G queries).
void check_attention(int nh, int nkv, int hd, int block_size, int splits, std::uint32_t seed,
                     const std::vector<Seq> &seqs = kMixed, int kernel = 0,
                     bool kv_heads_fast = false, bool generic_group = false) {
  const bool decode_kernel = kernel == 1;
  CudaContext ctx;
  std::mt19937 rng(seed);
  const int G = nh / nkv;
  const int tile_q = std::max(1, (kernel == 2 ? kFlashRows : kAttnMaxRows) / G);
  const KvLayout layout{2, block_size, nkv, hd};
  const int layer = 1;
  // Block tables: distinct shuffled blocks.
  int total_blocks = 0;
  for (auto &s : seqs) total_blocks += (s.start_pos + s.num_tokens + block_size - 1) / block_size;
  const int num_blocks = total_blocks + 3;
  std::vector<std::int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::int32_t> table;
  std::vector<int> block_offset;
  std::vector<AttnTile> tiles;
  int T = 0;
  for (auto &s : seqs) {
    block_offset.push_back(static_cast<int>(table.size()));
    const int nb = (s.start_pos + s.num_tokens + block_size - 1) / block_size;
    for (int i = 0; i < nb; ++i) table.push_back(perm[table.size()]);
    for (int j = 0; j < s.num_tokens; j += tile_q)
      tiles.push_back(
          {T + j, std::min(tile_q, s.num_tokens - j), s.start_pos + j, block_offset.back()});
    T += s.num_tokens;
  }
  const int stride = (nh + 2 * nkv) * hd;
  const auto qkv = test::random_bf16_values(std::size_t(T) * stride, rng, -2, 2);
  const std::size_t cache_elems = std::size_t(num_blocks) * layout.block_elems();
  const auto cache = test::random_bf16_values(cache_elems, rng, -2, 2);

  auto d_qkv = upload(ctx, to_bf16(qkv));
  auto d_cache = upload(ctx, to_bf16(cache));
  auto d_table = upload(ctx, table);
  auto d_tiles = upload(ctx, tiles);
  const std::size_t entries = tiles.size() * nkv * splits;
  DeviceBuffer po(entries * kAttnMaxRows * hd * 4), pml(entries * kAttnMaxRows * 2 * 4);
  DeviceBuffer out(std::size_t(T) * nh * hd * 2);
  test::poison(ctx, out);
  AttnParams p;
  p.qkv = d_qkv.as<bf16>();
  p.row_stride = stride;
  p.tiles = d_tiles.as<AttnTile>();
  p.num_tiles = static_cast<int>(tiles.size());
  p.tile_q = tile_q;
  p.block_table = d_table.as<std::int32_t>();
  p.cache = d_cache.as<bf16>();
  p.layout = layout;
  p.layer = layer;
  p.num_q_heads = nh;
  p.scale = 1.0f / std::sqrt(float(hd));
  p.num_splits = splits;
  p.partial_o = po.as<float>();
  p.partial_ml = pml.as<float>();
  p.out = out.as<bf16>();
  p.kv_heads_fast = kv_heads_fast;
  p.decode_generic_group = generic_group;
  if (decode_kernel)
    launch_decode_attention(ctx.compute(), p);
  else if (kernel == 2)
    launch_flash_attention(ctx.compute(), p);
  else
    launch_paged_attention(ctx.compute(), p);
  const auto got = from_bf16(download<std::uint16_t>(ctx, out, std::size_t(T) * nh * hd));

  std::vector<float> ref(got.size());
  int t0 = 0;
  for (std::size_t si = 0; si < seqs.size(); ++si) {
    const Seq &s = seqs[si];
    for (int j = 0; j < s.num_tokens; ++j) {
      const int t = t0 + j, qpos = s.start_pos + j;
      for (int h = 0; h < nh; ++h) {
        const int kvh = h / G;
        std::vector<double> sc(qpos + 1);
        double mx = -INFINITY;
        for (int k = 0; k <= qpos; ++k) {
          const int blk = table[block_offset[si] + k / block_size];
          const auto off = layout.offset(blk, layer, 0, k % block_size) + std::int64_t(kvh) * hd;
          double dot = 0;
          for (int d = 0; d < hd; ++d)
            dot += double(qkv[std::size_t(t) * stride + h * hd + d]) * cache[off + d];
          sc[k] = dot / std::sqrt(double(hd));
          mx = std::max(mx, sc[k]);
        }
        double sum = 0;
        for (auto &v : sc) sum += (v = std::exp(v - mx));
        for (int d = 0; d < hd; ++d) {
          double acc = 0;
          for (int k = 0; k <= qpos; ++k) {
            const int blk = table[block_offset[si] + k / block_size];
            acc += sc[k] *
                   cache[layout.offset(blk, layer, 1, k % block_size) + std::int64_t(kvh) * hd + d];
          }
          ref[std::size_t(t) * nh * hd + h * hd + d] = static_cast<float>(acc / sum);
        }
      }
    }
    t0 += s.num_tokens;
  }
  EXPECT_LT(rel_err(got, ref), 1e-2);
}

TEST(CudaAttention, MixedBatchNoSplit) {
  KEEL_REQUIRE_CUDA_DEVICE();
  check_attention(8, 2, 64, 16, 1, 1);
}
TEST(CudaAttention, MixedBatchSplitK) {
  KEEL_REQUIRE_CUDA_DEVICE();
  check_attention(8, 2, 64, 16, 3, 2);
  check_attention(8, 2, 64, 16, 7, 3);
}
TEST(CudaAttention, LlamaShapesGqa4Hd128) {
  KEEL_REQUIRE_CUDA_DEVICE();
  check_attention(32, 8, 128, 16, 1, 4);
  check_attention(32, 8, 128, 16, 5, 5);
}
TEST(CudaAttention, MhaOddBlockSizeHd256) {
  KEEL_REQUIRE_CUDA_DEVICE();
  check_attention(2, 2, 256, 5, 1, 6);
  check_attention(4, 1, 96, 32, 4, 7);
}

TEST(CudaAttention, DecodeKernelMatchesReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  ASSERT_TRUE(decode_attention_supported(32, 8, 128));
  ASSERT_FALSE(decode_attention_supported(32, 2, 128));  // 16 heads per group
  ASSERT_FALSE(decode_attention_supported(8, 8, 96));
  std::uint32_t seed = 20;
  for (auto [nh, nkv, hd] :
       {std::array<int, 3>{32, 8, 128}, {32, 8, 64}, {8, 8, 256}, {16, 2, 128}, {28, 4, 128}})
    for (int splits : {1, 2, 9}) {
      SCOPED_TRACE(std::to_string(nh) + "/" + std::to_string(nkv) + "/" + std::to_string(hd) +
                   " splits " + std::to_string(splits));
      check_attention(nh, nkv, hd, 16, splits, seed++, kDecode, true);
    }
  // The general kernel agrees on the same decode batch.
  check_attention(32, 8, 128, 16, 1, seed++, kDecode, false);
}

// The same kernel with its blocks ordered kv head fastest (AttnParams::kv_heads_fast):
// every (tile, head, split) must still be computed once and land in its own place; and
// with registers for kMaxGroup heads whatever the group (decode_generic_group).
TEST(CudaAttention, DecodeKernelHeadsFastAndGenericGroupMatchReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 60;
  for (auto [nh, nkv, hd] :
       {std::array<int, 3>{32, 8, 128}, {8, 8, 256}, {28, 4, 64}, {16, 8, 128}})
    for (int splits : {1, 3, 8})
      for (bool heads_fast : {false, true})
        for (bool generic : {false, true}) {
          if (!heads_fast && !generic) continue;  // DecodeKernelMatchesReference
          SCOPED_TRACE(std::to_string(nh) + "/" + std::to_string(nkv) + "/" + std::to_string(hd) +
                       " splits " + std::to_string(splits) + (heads_fast ? " heads fast" : "") +
                       (generic ? " generic" : ""));
          check_attention(nh, nkv, hd, 16, splits, seed++, kDecode, 1, heads_fast, generic);
        }
}

// Prefill chunks long enough for many key tiles, on cached prefixes, plus single tokens.
const std::vector<Seq> kPrefill = {{0, 300}, {500, 129}, {20, 37}, {0, 1}, {7, 16}, {63, 2}};

TEST(CudaAttention, FlashKernelMatchesReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  ASSERT_TRUE(flash_attention_supported(32, 8, 128));
  ASSERT_TRUE(flash_attention_supported(28, 4, 64));
  ASSERT_FALSE(flash_attention_supported(8, 8, 256));
  ASSERT_FALSE(flash_attention_supported(8, 8, 96));
  std::uint32_t seed = 40;
  for (auto [nh, nkv, hd, bs] : {std::array<int, 4>{32, 8, 128, 16},
                                 {32, 8, 64, 16},
                                 {28, 4, 128, 16},
                                 {8, 8, 64, 5},
                                 {16, 1, 128, 32}}) {
    SCOPED_TRACE(std::to_string(nh) + "/" + std::to_string(nkv) + "/" + std::to_string(hd) +
                 " block " + std::to_string(bs));
    check_attention(nh, nkv, hd, bs, 1, seed++, kPrefill, 2);
  }
  check_attention(32, 8, 128, 16, 1, seed++, kMixed, 2);
  // Blocks ordered kv head fastest.
  check_attention(32, 8, 128, 16, 1, seed++, kPrefill, 2, true);
  check_attention(28, 4, 64, 16, 1, seed++, kMixed, 2, true);
}

TEST(CudaAttention, RejectsUnsupportedShapes) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  AttnParams p;
  p.num_tiles = 1;
  p.layout = {1, 16, 1, 512};  // head_dim too large
  p.num_q_heads = 1;
  p.tile_q = 1;
  EXPECT_THROW(launch_paged_attention(ctx.compute(), p), Error);
  p.layout.head_dim = 64;
  p.num_q_heads = 64;  // 64 q heads per kv head > 32 rows
  EXPECT_THROW(launch_paged_attention(ctx.compute(), p), Error);
}

}  // namespace
}  // namespace keel::cuda
