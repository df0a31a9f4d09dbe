// k_mla_attention.h alone against a host reference in double: the latent cache write
// (rmsnorm of c, rope of k_rope, into each token's paged slot) and the absorbed attention
// over a ragged batch of tiles (a prefill from 0, a decode at position 9, a chunk after a
// cached prefix of 3), both rope styles, yarn-like mscale. Inputs are bf16 values, so the
// only differences are fp32 accumulation and the bf16 rounding of the outputs (2^-8
// relative): the bound is 1e-2 relative to the output's norm per row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "exec/cuda/k_mla_attention.h"

namespace keel::cuda {
namespace {

using test::download;
using test::from_bf16;
using test::random_bf16_values;
using test::to_bf16;
using test::upload;

constexpr int kH = 3, kNope = 16, kRope = 8, kV = 24, kR = 32, kW = kR + kRope;
constexpr int kBs = 4, kLayers = 2, kLayer = 1, kBlocks = 8;

KvLayout latent_layout() {
  KvLayout l;
  l.num_layers = kLayers;
  l.block_size = kBs;
  l.num_kv_heads = 1;
  l.head_dim = kW;
  l.planes = 1;
  return l;
}

std::vector<float> inv_freq() {
  std::vector<float> f(kRope / 2);
  for (int i = 0; i < kRope / 2; ++i)
    f[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / kRope));
  return f;
}

// Rotates the rope part x[0..kRope) at position pos, as the kernels do.
void host_rope(float *x, int pos, float mscale, bool interleaved) {
  const auto f = inv_freq();
  std::vector<float> y(x, x + kRope);
  for (int i = 0; i < kRope / 2; ++i) {
    const double ang = static_cast<double>(static_cast<float>(pos) * f[i]);
    const double c = std::cos(ang) * mscale, s = std::sin(ang) * mscale;
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + kRope / 2;
    y[a] = static_cast<float>(x[a] * c - x[b] * s);
    y[b] = static_cast<float>(x[b] * c + x[a] * s);
  }
  std::copy(y.begin(), y.end(), x);
}

// Row-wise ||g - r|| / ||r||, reporting the worst row and its first element off by more
// than tol relative to the row's largest value.
double worst_row_err(const std::vector<float> &g, const std::vector<float> &r, int row_len,
                     const char *what) {
  double worst = 0;
  for (std::size_t row = 0; row * row_len < r.size(); ++row) {
    double num = 0, den = 0, amax = 0;
    for (int i = 0; i < row_len; ++i) {
      const double d = g[row * row_len + i] - r[row * row_len + i];
      num += d * d;
      den += r[row * row_len + i] * double(r[row * row_len + i]);
      amax = std::max(amax, std::abs(d));
    }
    const double e = std::isfinite(num) ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
    if (e > 1e-2) {
      for (int i = 0; i < row_len; ++i)
        if (!(std::abs(g[row * row_len + i] - r[row * row_len + i]) <= 1e-2 * std::sqrt(den)))
          ADD_FAILURE() << what << ": row " << row << " element " << i << " gpu "
                        << g[row * row_len + i] << " ref " << r[row * row_len + i]
                        << " (row rel err " << e << ", max abs diff " << amax << ")";
    }
    worst = std::max(worst, e);
  }
  return worst;
}

class MlaKernels : public ::testing::TestWithParam<bool> {};  // interleaved rope
INSTANTIATE_TEST_SUITE_P(Rope, MlaKernels, ::testing::Values(false, true),
                         [](const auto &info) { return info.param ? "interleaved" : "halves"; });

TEST_P(MlaKernels, KvWriteNormsRopesAndPagesEachRow) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const bool interleaved = GetParam();
  CudaContext ctx;
  std::mt19937 rng(3);
  const KvLayout layout = latent_layout();
  constexpr int T = 5;
  const float eps = 1e-6f, mscale = 1.25f;
  const auto ckv = random_bf16_values(T * kW, rng);
  const auto norm = random_bf16_values(kR, rng, 0.5f, 1.5f);
  const std::vector<std::int32_t> positions = {0, 7, 3, 12, 1};
  const std::vector<std::int32_t> slots = {5 * kBs + 0, 2 * kBs + 3, -1, 7 * kBs + 1, 0};
  const auto cache0 = random_bf16_values(kBlocks * layout.block_elems(), rng);
  auto d_cache = upload(ctx, to_bf16(cache0));
  auto d_ckv = upload(ctx, to_bf16(ckv));
  auto d_norm = upload(ctx, to_bf16(norm));
  auto d_pos = upload(ctx, positions);
  auto d_slots = upload(ctx, slots);
  auto d_freq = upload(ctx, inv_freq());
  MlaRope rp{d_freq.as<float>(), mscale, interleaved};
  launch_mla_kv_write(ctx.compute(), d_ckv.as<bf16>(), T, kR, kRope, d_norm.as<bf16>(), eps,
                      d_pos.as<std::int32_t>(), rp, d_slots.as<std::int32_t>(), d_cache.as<bf16>(),
                      layout, kLayer);
  const auto got = from_bf16(download<std::uint16_t>(ctx, d_cache, cache0.size()));
  std::vector<float> ref = cache0;
  for (int t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    float *row = ref.data() + layout.offset(slots[t] / kBs, kLayer, 0, slots[t] % kBs);
    double ss = 0;
    for (int i = 0; i < kR; ++i) ss += double(ckv[t * kW + i]) * ckv[t * kW + i];
    const double inv = 1.0 / std::sqrt(ss / kR + eps);
    for (int i = 0; i < kR; ++i) row[i] = static_cast<float>(ckv[t * kW + i] * inv * norm[i]);
    std::copy(ckv.begin() + t * kW + kR, ckv.begin() + (t + 1) * kW, row + kR);
    host_rope(row + kR, positions[t], mscale, interleaved);
  }
  // Rows not written (the padding token, every other slot) must be untouched.
  const double err = worst_row_err(got, ref, kW, "kv write");
  std::printf("mla kv write (%s rope): worst row rel err %.3g\n",
              interleaved ? "interleaved" : "halves", err);
  EXPECT_LT(err, 1e-2);
}

TEST_P(MlaKernels, AbsorbedAttentionMatchesHostReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const bool interleaved = GetParam();
  CudaContext ctx;
  std::mt19937 rng(11);
  const KvLayout layout = latent_layout();
  // Three sequences: A prefills positions 0..4, B decodes at 9, C computes 3..4 after a
  // cached prefix of 3. Block tables scrambled.
  const std::vector<AttnTile> tiles = {{0, 5, 0, 0}, {5, 1, 9, 2}, {6, 2, 3, 5}};
  const std::vector<std::int32_t> table = {5, 2, /*B*/ 0, 7, 3, /*C*/ 6, 1};
  constexpr int T = 8;
  const float scale = 0.37f, mscale = 1.1f;
  const auto q = random_bf16_values(T * kH * (kNope + kRope), rng);
  const auto kv_b = random_bf16_values(kH * (kNope + kV) * kR, rng, -0.3f, 0.3f);
  const auto cache = random_bf16_values(kBlocks * layout.block_elems(), rng);
  auto d_q = upload(ctx, to_bf16(q));
  auto d_kvb = upload(ctx, to_bf16(kv_b));
  auto d_cache = upload(ctx, to_bf16(cache));
  auto d_tiles = upload(ctx, tiles);
  auto d_table = upload(ctx, table);
  auto d_freq = upload(ctx, inv_freq());
  DeviceBuffer d_out(T * kH * kV * sizeof(bf16));
  test::poison(ctx, d_out);
  MlaAttnParams p;
  p.q = d_q.as<bf16>();
  p.kv_b = d_kvb.as<bf16>();
  p.tiles = d_tiles.as<AttnTile>();
  p.num_tiles = static_cast<int>(tiles.size());
  p.block_table = d_table.as<std::int32_t>();
  p.cache = d_cache.as<bf16>();
  p.layout = layout;
  p.layer = kLayer;
  p.num_heads = kH;
  p.nope = kNope;
  p.rope = kRope;
  p.v = kV;
  p.kv_lora = kR;
  p.scale = scale;
  p.rp = MlaRope{d_freq.as<float>(), mscale, interleaved};
  p.out = d_out.as<bf16>();
  launch_mla_attention(ctx.compute(), p);
  const auto got = from_bf16(download<std::uint16_t>(ctx, d_out, T * kH * kV));

  std::vector<float> ref(T * kH * kV);
  for (const AttnTile &tile : tiles)
    for (int j = 0; j < tile.num_q; ++j) {
      const int t = tile.q_start + j, pos = tile.pos0 + j;
      for (int h = 0; h < kH; ++h) {
        const float *qn = q.data() + (t * kH + h) * (kNope + kRope);
        float qr[kRope];
        std::copy(qn + kNope, qn + kNope + kRope, qr);
        host_rope(qr, pos, mscale, interleaved);
        const float *wk = kv_b.data() + h * (kNope + kV) * kR, *wv = wk + kNope * kR;
        std::vector<double> qa(kR, 0.0), lat(kR, 0.0), s(pos + 1);
        for (int d = 0; d < kNope; ++d)
          for (int r = 0; r < kR; ++r) qa[r] += double(qn[d]) * wk[d * kR + r];
        double mx = -INFINITY;
        for (int k = 0; k <= pos; ++k) {
          const float *row =
              cache.data() + layout.offset(table[tile.block_offset + k / kBs], kLayer, 0, k % kBs);
          double dot = 0;
          for (int r = 0; r < kR; ++r) dot += qa[r] * row[r];
          for (int i = 0; i < kRope; ++i) dot += double(qr[i]) * row[kR + i];
          s[k] = dot * scale;
          mx = std::max(mx, s[k]);
        }
        double sum = 0;
        for (int k = 0; k <= pos; ++k) sum += (s[k] = std::exp(s[k] - mx));
        for (int k = 0; k <= pos; ++k) {
          const float *row =
              cache.data() + layout.offset(table[tile.block_offset + k / kBs], kLayer, 0, k % kBs);
          for (int r = 0; r < kR; ++r) lat[r] += s[k] / sum * row[r];
        }
        for (int d = 0; d < kV; ++d) {
          double o = 0;
          for (int r = 0; r < kR; ++r) o += double(wv[d * kR + r]) * lat[r];
          ref[(t * kH + h) * kV + d] = static_cast<float>(o);
        }
      }
    }
  const double err = worst_row_err(got, ref, kV, "mla attention");
  std::printf("mla attention (%s rope): worst (token, head) rel err %.3g\n",
              interleaved ? "interleaved" : "halves", err);
  EXPECT_LT(err, 1e-2);
}

// The split path (num_splits > 0: absorb, tensor-core split kernel, combine) against a host
// fp64 reference of the absorbed attention. One launch holds a decode query per context of
// the case (so queries of different lengths share it) and a tile of 3 queries ending at the
// longest context; block tables scrambled; cache rows carry an 8-value tail (DSA's index
// key) that must be ignored. With `dsa`, queries with p + 1 > topk read a shuffled
// selection with gaps. bf16 bounds: qa and P are rounded to bf16 (2^-9 relative each) and
// the output to bf16 (2^-8): 1e-2 relative to the output row's norm, as the simple kernel.
struct SplitCase {
  const char *name;
  int H, nope, rope, v, R;
  std::vector<int> contexts;
  std::vector<int> splits;
  int topk;  // 0: dense
};

void PrintTo(const SplitCase &c, std::ostream *os) { *os << c.name; }

std::vector<float> rope_freqs(int rope) {
  std::vector<float> f(rope / 2);
  for (int i = 0; i < rope / 2; ++i)
    f[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / rope));
  return f;
}

class MlaSplit : public ::testing::TestWithParam<SplitCase> {};

TEST_P(MlaSplit, MatchesHostReferenceForEverySplitCount) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const SplitCase &c = GetParam();
  CudaContext ctx;
  std::mt19937 rng(c.H * 131 + c.R);
  const int H = c.H, R = c.R, rope = c.rope, nope = c.nope, V = c.v, W = R + rope, qk = nope + rope;
  constexpr int bs = 16, tail = 8;
  KvLayout layout;
  layout.num_layers = kLayers;
  layout.block_size = bs;
  layout.num_kv_heads = 1;
  layout.head_dim = W + tail;
  layout.planes = 1;
  ASSERT_TRUE(mla_split_supported(R, rope, layout.slot_elems()));

  // Tiles: a decode query per context, then 3 queries ending at the longest context.
  struct Seq {
    int q_start, num_q, pos0, ctx;
  };
  std::vector<Seq> seqs;
  int T = 0;
  for (int n : c.contexts) seqs.push_back({T++, 1, n - 1, n});
  const int longest = *std::max_element(c.contexts.begin(), c.contexts.end());
  if (longest >= 3) {
    seqs.push_back({T, 3, longest - 3, longest});
    T += 3;
  }
  int blocks = 0;
  for (const Seq &q : seqs) blocks += (q.ctx + bs - 1) / bs;
  std::vector<std::int32_t> perm(blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<AttnTile> tiles;
  std::vector<std::int32_t> table;
  for (const Seq &q : seqs) {
    tiles.push_back({q.q_start, q.num_q, q.pos0, static_cast<std::int32_t>(table.size())});
    for (int b = 0; b < (q.ctx + bs - 1) / bs; ++b) table.push_back(perm[table.size()]);
  }
  // DSA: each query past topk keys reads a shuffled topk of its positions (gaps included).
  std::vector<std::int32_t> sel(c.topk > 0 ? std::size_t(T) * c.topk : 0, -1);
  auto keys_of = [&](int t, int pos) {
    std::vector<int> k;
    if (c.topk > 0 && pos + 1 > c.topk) {
      k.assign(sel.begin() + std::size_t(t) * c.topk, sel.begin() + std::size_t(t + 1) * c.topk);
    } else {
      k.resize(pos + 1);
      std::iota(k.begin(), k.end(), 0);
    }
    return k;
  };
  if (c.topk > 0)
    for (const Seq &q : seqs)
      for (int j = 0; j < q.num_q; ++j) {
        const int pos = q.pos0 + j;
        if (pos + 1 <= c.topk) continue;
        std::vector<std::int32_t> all(pos + 1);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        std::copy_n(all.begin(), c.topk, sel.begin() + std::size_t(q.q_start + j) * c.topk);
      }

  const float scale = 1.0f / std::sqrt(static_cast<float>(qk)), mscale = 1.05f;
  const auto q = random_bf16_values(std::size_t(T) * H * qk, rng);
  const auto kv_b = random_bf16_values(std::size_t(H) * (nope + V) * R, rng, -0.3f, 0.3f);
  const auto cache = random_bf16_values(std::size_t(blocks) * layout.block_elems(), rng);
  const auto freqs = rope_freqs(rope);
  auto d_q = upload(ctx, to_bf16(q));
  auto d_kvb = upload(ctx, to_bf16(kv_b));
  auto d_cache = upload(ctx, to_bf16(cache));
  auto d_tiles = upload(ctx, tiles);
  auto d_table = upload(ctx, table);
  auto d_freq = upload(ctx, freqs);
  DeviceBuffer d_sel = c.topk > 0 ? upload(ctx, sel) : DeviceBuffer();

  // Reference, per (query, head).
  std::vector<float> ref(std::size_t(T) * H * V);
  for (const Seq &sq : seqs)
    for (int j = 0; j < sq.num_q; ++j) {
      const int t = sq.q_start + j, pos = sq.pos0 + j;
      const std::vector<int> keys = keys_of(t, pos);
      const std::int32_t *tbl = table.data() + tiles[&sq - seqs.data()].block_offset;
      for (int h = 0; h < H; ++h) {
        const float *qn = q.data() + (std::size_t(t) * H + h) * qk;
        std::vector<double> qr(rope), qa(R, 0.0), lat(R, 0.0), s(keys.size());
        for (int i = 0; i < rope / 2; ++i) {
          const double ang = static_cast<double>(static_cast<float>(pos) * freqs[i]);
          const double cs = std::cos(ang) * mscale, sn = std::sin(ang) * mscale;
          const int a = i, b = i + rope / 2;  // halves
          qr[a] = qn[nope + a] * cs - qn[nope + b] * sn;
          qr[b] = qn[nope + b] * cs + qn[nope + a] * sn;
        }
        const float *wk = kv_b.data() + std::size_t(h) * (nope + V) * R, *wv = wk + nope * R;
        for (int d = 0; d < nope; ++d)
          for (int r = 0; r < R; ++r) qa[r] += double(qn[d]) * wk[d * R + r];
        double mx = -INFINITY;
        for (std::size_t k = 0; k < keys.size(); ++k) {
          const float *row =
              cache.data() + layout.offset(tbl[keys[k] / bs], kLayer, 0, keys[k] % bs);
          double dot = 0;
          for (int r = 0; r < R; ++r) dot += qa[r] * row[r];
          for (int i = 0; i < rope; ++i) dot += qr[i] * row[R + i];
          s[k] = dot * scale;
          mx = std::max(mx, s[k]);
        }
        double sum = 0;
        for (double &x : s) sum += (x = std::exp(x - mx));
        for (std::size_t k = 0; k < keys.size(); ++k) {
          const float *row =
              cache.data() + layout.offset(tbl[keys[k] / bs], kLayer, 0, keys[k] % bs);
          for (int r = 0; r < R; ++r) lat[r] += s[k] / sum * row[r];
        }
        for (int d = 0; d < V; ++d) {
          double o = 0;
          for (int r = 0; r < R; ++r) o += double(wv[d * R + r]) * lat[r];
          ref[(std::size_t(t) * H + h) * V + d] = static_cast<float>(o);
        }
      }
    }

  for (const int splits : c.splits) {
    DeviceBuffer d_out(std::size_t(T) * H * V * sizeof(bf16));
    DeviceBuffer d_scratch(mla_split_scratch_bytes(T, H, R, splits));
    test::poison(ctx, d_out);
    test::poison(ctx, d_scratch);
    MlaAttnParams p;
    p.q = d_q.as<bf16>();
    p.kv_b = d_kvb.as<bf16>();
    p.tiles = d_tiles.as<AttnTile>();
    p.num_tiles = static_cast<int>(tiles.size());
    p.block_table = d_table.as<std::int32_t>();
    p.cache = d_cache.as<bf16>();
    p.layout = layout;
    p.layer = kLayer;
    p.num_heads = H;
    p.nope = nope;
    p.rope = rope;
    p.v = V;
    p.kv_lora = R;
    p.scale = scale;
    p.rp = MlaRope{d_freq.as<float>(), mscale, false};
    p.out = d_out.as<bf16>();
    if (c.topk > 0) {
      p.sel = d_sel.as<std::int32_t>();
      p.topk = c.topk;
    }
    p.num_splits = splits;
    p.T = T;
    p.scratch = d_scratch.data();
    launch_mla_attention(ctx.compute(), p);
    const auto got = from_bf16(download<std::uint16_t>(ctx, d_out, std::size_t(T) * H * V));
    const std::string what = std::string(c.name) + " splits " + std::to_string(splits);
    double max_abs = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
      max_abs = std::max(max_abs, std::abs(double(got[i]) - ref[i]));
    const double err = worst_row_err(got, ref, V, what.c_str());
    std::printf("mla split %s: worst (token, head) rel err %.3g, max abs err %.3g\n", what.c_str(),
                err, max_abs);
    EXPECT_LT(err, 1e-2) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MlaSplit,
    ::testing::Values(
        SplitCase{"tiny4", 4, 16, 8, 24, 32, {1, 15, 16, 17, 1000, 5000}, {1, 2, 3, 7, 64, 256}, 0},
        SplitCase{"tiny9_rope16", 9, 32, 16, 16, 64, {1, 16, 17, 1000}, {1, 5, 32}, 0},
        SplitCase{"heads16", 16, 16, 8, 24, 32, {1, 15, 17, 5000}, {1, 4, 200}, 0},
        SplitCase{"heads20", 20, 16, 8, 24, 32, {1, 17, 1000}, {1, 3}, 0},
        SplitCase{"tiny4_dsa", 4, 16, 8, 24, 32, {1, 15, 16, 17, 1000, 5000}, {1, 2, 7, 64}, 16},
        SplitCase{"heads16_dsa300", 16, 16, 8, 24, 32, {17, 1000, 5000}, {1, 3, 16}, 300},
        SplitCase{"deepseek128", 128, 128, 64, 128, 512, {1, 16, 1000, 5000}, {1, 8, 37}, 0},
        SplitCase{"glm5_dsa", 64, 192, 64, 256, 512, {17, 5000}, {1, 4}, 2048}),
    [](const auto &info) { return std::string(info.param.name); });

// Shapes the kernels do not take are refused by name before launch.
TEST(MlaKernelShapes, RefusesASplitLayoutOrOddRope) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  MlaAttnParams p;
  p.layout = latent_layout();
  p.layout.planes = 2;
  p.num_heads = kH, p.nope = kNope, p.rope = kRope, p.v = kV, p.kv_lora = kR;
  EXPECT_THROW(launch_mla_attention(ctx.compute(), p), Error);
  p.layout.planes = 1;
  p.rope = 7;
  EXPECT_THROW(launch_mla_attention(ctx.compute(), p), Error);
  // The split path: kv_lora not a multiple of 16, or no scratch.
  p.rope = kRope;
  p.num_tiles = 1;
  p.num_splits = 2;
  p.T = 1;
  EXPECT_THROW(launch_mla_attention(ctx.compute(), p), Error);  // no scratch
  DeviceBuffer scratch(mla_split_scratch_bytes(1, kH, kR, 2));
  p.scratch = scratch.data();
  p.kv_lora = 24;
  p.layout.head_dim = 24 + kRope;
  EXPECT_THROW(launch_mla_attention(ctx.compute(), p), Error);
}

}  // namespace
}  // namespace keel::cuda
