// k_mla_attention.h alone against a host reference in double: the latent cache write
// (rmsnorm of c, rope of k_rope, into each token's paged slot) and the absorbed attention
// over a ragged batch of tiles (a prefill from 0, a decode at position 9, a chunk after a
// cached prefix of 3), both rope styles, yarn-like mscale. Inputs are bf16 values, so the
// only differences are fp32 accumulation and the bf16 rounding of the outputs (2^-8
// relative): the bound is 1e-2 relative to the output's norm per row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
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
}

}  // namespace
}  // namespace keel::cuda
