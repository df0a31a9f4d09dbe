// Paged attention over a mixed ragged batch (prefill chunks with cached prefixes, decode
// tokens, a first token) against a float64 CPU reference, with and without split-K, and
// with sliding windows smaller than, equal to and larger than the context.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_features.h"
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
// window > 0: a query at p sees keys (p - window, p]; the cache rows no query of a
// sequence may see are NaN, so a kernel that reads them (or lets them reach P.V) fails.
// with_sinks: a sink logit per q head (AttnParams::sinks, gpt-oss) joins every row's
// softmax denominator; some far above the rows' scores, some far below.
void check_attention(int nh, int nkv, int hd, int block_size, int splits, std::uint32_t seed,
                     const std::vector<Seq> &seqs = kMixed, int kernel = 0, int window = 0,
                     bool merge_in_kernel = false, std::size_t smem_per_block = 0,
                     bool with_sinks = false) {
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
  auto cache = test::random_bf16_values(cache_elems, rng, -2, 2);
  auto lowest_key = [&](int qpos) { return window > 0 ? std::max(0, qpos - window + 1) : 0; };
  for (std::size_t si = 0; si < seqs.size(); ++si)
    for (int k = 0; k < lowest_key(seqs[si].start_pos); ++k) {
      const int blk = table[block_offset[si] + k / block_size];
      for (int kv = 0; kv < 2; ++kv) {
        const auto off = layout.offset(blk, layer, kv, k % block_size);
        std::fill(cache.begin() + off, cache.begin() + off + layout.slot_elems(), NAN);
      }
    }

  std::vector<float> sinks(nh);
  std::uniform_real_distribution<float> sink_dist(-3.0f, 3.0f);
  for (int h = 0; h < nh; ++h) sinks[h] = h % 5 == 1 ? 12.0f : h % 5 == 3 ? -20.0f : sink_dist(rng);
  const DeviceBuffer d_sinks = upload(ctx, sinks);
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
  p.window = window;
  p.smem_per_block = smem_per_block;
  p.sinks = with_sinks ? d_sinks.as<float>() : nullptr;
  // merge_in_kernel: the decode kernel merges its splits (split_counters); launched
  // twice, so a counter left unreset breaks the second.
  DeviceBuffer counters(tiles.size() * nkv * sizeof(unsigned));
  if (merge_in_kernel) {
    KEEL_CUDA_CHECK(cudaMemsetAsync(counters.data(), 0, counters.bytes(),
                                    ctx.compute().get("cudaMemsetAsync")));
    p.split_counters = counters.as<unsigned>();
    launch_decode_attention(ctx.compute(), p);
    test::poison(ctx, out);
  }
  if (decode_kernel)
    launch_decode_attention(ctx.compute(), p);
  else if (kernel == 2)
    launch_flash_attention(ctx.compute(), p);
  else
    launch_paged_attention(ctx.compute(), p);
  const auto got = from_bf16(download<std::uint16_t>(ctx, out, std::size_t(T) * nh * hd));
  if (merge_in_kernel) {
    for (unsigned c : download<unsigned>(ctx, counters, tiles.size() * nkv)) {
      ASSERT_EQ(c, 0u) << "a split counter was left set";
    }
  }

  std::vector<float> ref(got.size());
  int t0 = 0;
  for (std::size_t si = 0; si < seqs.size(); ++si) {
    const Seq &s = seqs[si];
    for (int j = 0; j < s.num_tokens; ++j) {
      const int t = t0 + j, qpos = s.start_pos + j, lo = lowest_key(qpos);
      for (int h = 0; h < nh; ++h) {
        const int kvh = h / G;
        std::vector<double> sc(qpos + 1, 0.0);  // entries below lo stay 0 (no weight)
        double mx = -INFINITY;
        for (int k = lo; k <= qpos; ++k) {
          const int blk = table[block_offset[si] + k / block_size];
          const auto off = layout.offset(blk, layer, 0, k % block_size) + std::int64_t(kvh) * hd;
          double dot = 0;
          for (int d = 0; d < hd; ++d)
            dot += double(qkv[std::size_t(t) * stride + h * hd + d]) * cache[off + d];
          sc[k] = dot / std::sqrt(double(hd));
          mx = std::max(mx, sc[k]);
        }
        if (with_sinks) mx = std::max(mx, double(sinks[h]));
        double sum = with_sinks ? std::exp(double(sinks[h]) - mx) : 0.0;  // no value row
        for (int k = lo; k <= qpos; ++k) sum += (sc[k] = std::exp(sc[k] - mx));
        std::vector<double> acc(hd, 0.0);
        for (int k = lo; k <= qpos; ++k) {
          const int blk = table[block_offset[si] + k / block_size];
          const float *vr =
              cache.data() + layout.offset(blk, layer, 1, k % block_size) + std::int64_t(kvh) * hd;
          for (int d = 0; d < hd; ++d) acc[d] += sc[k] * vr[d];
        }
        for (int d = 0; d < hd; ++d)
          ref[std::size_t(t) * nh * hd + h * hd + d] = static_cast<float>(acc[d] / sum);
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

// Split-K merged by the last split block (AttnParams::split_counters), as the runner
// launches it, also with more splits than a short sequence has 32-key chunks (empty
// splits) and with a sliding window.
TEST(CudaAttention, DecodeKernelMergesSplitsInKernel) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 90;
  for (auto [nh, nkv, hd] :
       {std::array<int, 3>{32, 8, 128}, {8, 8, 256}, {28, 4, 64}, {16, 2, 128}})
    for (int splits : {2, 9, 64}) {
      SCOPED_TRACE(std::to_string(nh) + "/" + std::to_string(nkv) + "/" + std::to_string(hd) +
                   " splits " + std::to_string(splits));
      check_attention(nh, nkv, hd, 16, splits, seed++, kDecode, 1, 0, true);
      check_attention(nh, nkv, hd, 16, splits, seed++, kDecode, 0, 100, true);
    }
}

// Prefill chunks long enough for many key tiles, on cached prefixes, plus single tokens.
const std::vector<Seq> kPrefill = {{0, 300}, {500, 129}, {20, 37}, {0, 1}, {7, 16}, {63, 2}};

// The flash kernel takes two tiles per block, one key pass when the second continues
// the first's sequence.

// Tiles of different sequences whose positions happen to continue each other (pos0 of
// the second = end of the first): a two-tile block must not share keys between them.
const std::vector<Seq> kAdjacent = {{0, 16}, {16, 16}, {0, 5}, {5, 40}, {45, 3}};

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
    check_attention(nh, nkv, hd, bs, 1, seed++, kAdjacent, 2);
  }
  check_attention(32, 8, 128, 16, 1, seed++, kMixed, 2);
}

// GPUs with 99 KB of shared memory per block (sm_86/89/120, and the forced baseline):
// head_dim 128 keeps one K/V tile in flight instead of two.
TEST(CudaAttention, FlashStagesFollowSharedMemory) {
  EXPECT_EQ(flash_attention_stages(128, 227 * 1024), 2);
  EXPECT_EQ(flash_attention_stages(128, 163 * 1024), 2);  // A100
  EXPECT_EQ(flash_attention_stages(128, kBaselineSmemPerBlock), 1);
  EXPECT_EQ(flash_attention_stages(64, kBaselineSmemPerBlock), 2);
  EXPECT_EQ(flash_attention_stages(128, 0), 2);
}

TEST(CudaAttention, FlashKernelOneStageMatchesReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 140;
  for (auto [nh, nkv, bs] : {std::array<int, 3>{32, 8, 16}, {28, 4, 16}, {16, 1, 32}}) {
    SCOPED_TRACE(std::to_string(nh) + "/" + std::to_string(nkv) + " block " + std::to_string(bs));
    check_attention(nh, nkv, 128, bs, 1, seed++, kPrefill, 2, 0, false, kBaselineSmemPerBlock);
    check_attention(nh, nkv, 128, bs, 1, seed++, kAdjacent, 2, 0, false, kBaselineSmemPerBlock);
  }
  check_attention(32, 8, 128, 16, 1, seed++, kMixed, 2, 0, false, kBaselineSmemPerBlock);
  check_attention(32, 8, 128, 16, 1, seed++, kMixed, 2, 100, false, kBaselineSmemPerBlock);
}

// ---- Sliding window (Mistral, Qwen2 use_sliding_window) ----
// Contexts: 300 / 629 / 1001 / 64 / 1 / 264 / 5 keys (decode: up to 1001); windows
// below, at and above them.
const std::vector<Seq> kWindowMixed = {{0, 300}, {500, 129}, {1000, 1}, {0, 64},
                                       {0, 1},   {200, 64},  {4, 1}};
const std::vector<Seq> kWindowDecode = {{300, 1}, {0, 1},  {1000, 1}, {31, 1},
                                        {32, 1},  {77, 1}, {15, 1},   {128, 1}};

std::string trace(int nh, int nkv, int hd, int splits, int window) {
  return std::to_string(nh) + "/" + std::to_string(nkv) + "/" + std::to_string(hd) + " splits " +
         std::to_string(splits) + " window " + std::to_string(window);
}

TEST(CudaAttention, SlidingWindowGeneralKernel) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 100;
  // Tiny head dims (the tiny test models), GQA and MHA, odd block sizes.
  for (auto [nh, nkv, hd, bs] : {std::array<int, 4>{4, 2, 16, 4},
                                 {4, 2, 32, 16},
                                 {8, 2, 64, 16},
                                 {4, 1, 96, 5},
                                 {2, 2, 256, 16}})
    for (int window : {1, 7, 64, 300, 4096})
      for (int splits : {1, 3, 16}) {
        SCOPED_TRACE(trace(nh, nkv, hd, splits, window) + " block " + std::to_string(bs));
        check_attention(nh, nkv, hd, bs, splits, seed++, kWindowMixed, 0, window);
      }
  check_attention(32, 8, 128, 16, 5, seed++, kWindowDecode, 0, 33);
}

// Split-K over the window's keys only: with many splits and a small window most splits
// get no key at all and must still combine to the right answer.
TEST(CudaAttention, SlidingWindowDecodeKernel) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 200;
  for (auto [nh, nkv, hd] :
       {std::array<int, 3>{32, 8, 128}, {32, 8, 64}, {16, 2, 128}, {8, 8, 256}, {28, 4, 64}})
    for (int window : {1, 31, 32, 33, 129, 1001, 100000})
      for (int splits : {1, 2, 9, 64}) {
        SCOPED_TRACE(trace(nh, nkv, hd, splits, window));
        check_attention(nh, nkv, hd, 16, splits, seed++, kWindowDecode, 1, window);
      }
}

TEST(CudaAttention, SlidingWindowFlashKernel) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 300;
  for (auto [nh, nkv, hd, bs] : {std::array<int, 4>{32, 8, 128, 16},
                                 {32, 8, 64, 16},
                                 {28, 4, 128, 16},
                                 {8, 8, 64, 5},
                                 {16, 1, 128, 32}})
    for (int window : {1, 8, 64, 65, 300, 4096}) {
      SCOPED_TRACE(trace(nh, nkv, hd, 1, window) + " block " + std::to_string(bs));
      check_attention(nh, nkv, hd, bs, 1, seed++, kWindowMixed, 2, window);
    }
  // Single-query tiles on the flash kernel too.
  check_attention(32, 8, 128, 16, 1, seed++, kWindowDecode, 2, 100);
  check_attention(32, 8, 64, 16, 1, seed++, kWindowMixed, 2, 40);
}

// Attention sinks (gpt-oss) on every kernel and every way a row's softmax ends: one
// split, split-K with the combine kernel, split-K merged in the decode kernel, the flash
// kernel's log2 units; with and without a sliding window (gpt-oss alternates them).
TEST(CudaAttention, SinksGeneralKernel) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 500;
  for (auto [nh, nkv, hd, bs] : {std::array<int, 4>{4, 2, 32, 16}, {8, 1, 64, 16}, {4, 4, 16, 5}})
    for (int window : {0, 7, 128})
      for (int splits : {1, 3, 16}) {
        SCOPED_TRACE(trace(nh, nkv, hd, splits, window) + " sinks");
        check_attention(nh, nkv, hd, bs, splits, seed++, kMixed, 0, window, false, 0, true);
      }
}

TEST(CudaAttention, SinksDecodeKernel) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 600;
  for (auto [nh, nkv, hd] : {std::array<int, 3>{64, 8, 64}, {32, 8, 128}, {8, 8, 256}})
    for (int window : {0, 128})
      for (int splits : {1, 9}) {
        SCOPED_TRACE(trace(nh, nkv, hd, splits, window) + " sinks");
        check_attention(nh, nkv, hd, 16, splits, seed++, kDecode, 1, window, false, 0, true);
        if (splits > 1)
          check_attention(nh, nkv, hd, 16, splits, seed++, kDecode, 1, window, true, 0, true);
      }
}

TEST(CudaAttention, SinksFlashKernel) {
  KEEL_REQUIRE_CUDA_DEVICE();
  std::uint32_t seed = 700;
  for (auto [nh, nkv, hd] : {std::array<int, 3>{64, 8, 64}, {32, 8, 128}, {8, 8, 64}})
    for (int window : {0, 8, 128}) {
      SCOPED_TRACE(trace(nh, nkv, hd, 1, window) + " sinks");
      check_attention(nh, nkv, hd, 16, 1, seed++, kMixed, 2, window, false, 0, true);
    }
}

// The window's speed win: an 8192-token prompt (8B attention shape, one layer) on the
// flash kernel skips the key tiles before every row's window. Times the kernel with CUDA
// events (best of 5) and prints the figures; with a 1024-key window it reads about a
// quarter of the keys, so it must take well under 60% of the full causal time.
TEST(CudaAttention, SlidingWindowFlashSkipsKeyTiles) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const int nh = 32, nkv = 8, hd = 128, bs = 16, n = 8192, tile_q = kFlashRows / (nh / nkv);
  const KvLayout layout{1, bs, nkv, hd};
  std::vector<std::int32_t> table(n / bs);
  std::iota(table.begin(), table.end(), 0);
  std::vector<AttnTile> tiles;
  for (int j = 0; j < n; j += tile_q) tiles.push_back({j, tile_q, j, 0});
  const int stride = (nh + 2 * nkv) * hd;
  DeviceBuffer qkv(std::size_t(n) * stride * 2),
      cache(std::size_t(n / bs) * layout.block_elems() * 2), out(std::size_t(n) * nh * hd * 2);
  KEEL_CUDA_CHECK(cudaMemsetAsync(qkv.data(), 0x3c, qkv.bytes(),
                                  ctx.compute().get("cudaMemsetAsync")));  // ~0.01
  KEEL_CUDA_CHECK(
      cudaMemsetAsync(cache.data(), 0x3c, cache.bytes(), ctx.compute().get("cudaMemsetAsync")));
  auto d_table = upload(ctx, table);
  auto d_tiles = upload(ctx, tiles);
  AttnParams p;
  p.qkv = qkv.as<bf16>();
  p.row_stride = stride;
  p.tiles = d_tiles.as<AttnTile>();
  p.num_tiles = static_cast<int>(tiles.size());
  p.tile_q = tile_q;
  p.block_table = d_table.as<std::int32_t>();
  p.cache = cache.as<bf16>();
  p.layout = layout;
  p.num_q_heads = nh;
  p.scale = 1.0f / std::sqrt(float(hd));
  p.out = out.as<bf16>();
  auto time_ms = [&](int window) {
    p.window = window;
    float best = 1e30f;
    for (int rep = 0; rep < 6; ++rep) {
      Event a(true), b(true);
      a.record(ctx.compute());
      launch_flash_attention(ctx.compute(), p);
      b.record(ctx.compute());
      b.wait(std::chrono::seconds(30), "flash timing");
      const float ms = Event::elapsed_ms(a, b);
      if (rep > 0) best = std::min(best, ms);  // the first launch warms up
    }
    return best;
  };
  const float full = time_ms(0), w4096 = time_ms(4096), w1024 = time_ms(1024),
              w8192 = time_ms(8192);
  std::printf(
      "flash attention, 8192-token prompt, 32/8 heads, hd 128, one layer: no window "
      "%.3f ms (%.0f TFLOP/s causal), window 8192 %.3f ms, 4096 %.3f ms, 1024 %.3f ms\n",
      full, 4.0 * nh * hd * (double(n) * (n + 1) / 2) / (full * 1e-3) / 1e12, w8192, w4096, w1024);
  EXPECT_LT(w1024, 0.6f * full);
  EXPECT_LT(w4096, full);
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
