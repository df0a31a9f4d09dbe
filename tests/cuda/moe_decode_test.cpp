// The routed experts' kernels with gpt-oss's activation (expert biases, clamped SwiGLU)
// and the fused decode kernels (k_moe_decode.h) against a float64 CPU reference of one
// MoE block: RMSNorm, router (+ bias), softmax top-k (exec/arch/moe_ffn.h's route_token),
// gate/up + bias, activation, down + bias, routing weights, residual add. The gather-GEMV
// path (launch_moe_gate_up_gemv / down / combine) and the GEMM path's activation
// (launch_moe_act) are checked on the same block.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cuda_test_util.h"
#include "exec/arch/moe_ffn.h"
#include "exec/cuda/k_moe.h"
#include "exec/cuda/k_moe_decode.h"

namespace keel::cuda {
namespace {

using test::download;
using test::upload;

struct BlockCase {
  int T, E, k, H, I;
  bool biases;
  float limit;  // 0: plain SwiGLU
};

double ref_act(double g, double u, const BlockCase &c) {
  if (c.limit > 0) {
    g = std::min(g, double(c.limit));
    u = std::clamp(u, -double(c.limit), double(c.limit));
    return (u + 1.0) * g / (1.0 + std::exp(-1.702 * g));
  }
  return g / (1.0 + std::exp(-g)) * u;
}

// One block's inputs and its float64 reference.
struct Block {
  BlockCase c;
  std::vector<float> residual, norm_w, router, router_bias, gu, dn, gu_bias, dn_bias;
  std::vector<float> x;              // [T, H] normed, rounded to bf16 as the kernels round
  std::vector<float> logits;         // [T, E]
  std::vector<std::int32_t> ids;     // [T, k]
  std::vector<float> w;              // [T, k]
  std::vector<bool> clear_margin;    // [T]: the k-th and k+1-th logits differ by > 1e-3
  std::vector<float> y;              // [T, H] the block's output (before the residual add)
  std::vector<double> g_pre, u_pre;  // [T k, I] gate / up projections before their biases
  int clamped = 0;                   // activations the limit changed

  explicit Block(const BlockCase &bc) : c(bc) {
    const auto [T, E, k, H, I, biases, limit] = bc;
    std::mt19937 rng(T * 1000 + E + H + (biases ? 7 : 0));
    std::normal_distribution<float> nd(0.0f, 1.5f);
    residual.resize(std::size_t(T) * H);
    for (float &v : residual) v = nd(rng);
    norm_w = test::random_bf16_values(H, rng, 0.5f, 1.5f);
    router = test::random_bf16_values(std::size_t(E) * H, rng, -0.3f, 0.3f);
    router_bias.assign(E, 0.0f);
    gu = test::random_bf16_values(std::size_t(E) * 2 * I * H, rng, -0.2f, 0.2f);
    dn = test::random_bf16_values(std::size_t(E) * H * I, rng, -0.2f, 0.2f);
    gu_bias.assign(std::size_t(E) * 2 * I, 0.0f);
    dn_bias.assign(std::size_t(E) * H, 0.0f);
    if (biases) {
      std::uniform_real_distribution<float> bd(-1.0f, 1.0f);
      for (float &v : gu_bias) v = bd(rng);
      for (float &v : dn_bias) v = bd(rng);
    }
    x.resize(std::size_t(T) * H);
    logits.resize(std::size_t(T) * E);
    ids.resize(std::size_t(T) * k);
    w.resize(std::size_t(T) * k);
    clear_margin.resize(T);
    y.assign(std::size_t(T) * H, 0.0f);
    g_pre.resize(std::size_t(T) * k * I);
    u_pre.resize(std::size_t(T) * k * I);
    for (int t = 0; t < T; ++t) {
      const float *r = &residual[std::size_t(t) * H];
      float ss = 0;
      for (int h = 0; h < H; ++h) ss += r[h] * r[h];
      const float inv = 1.0f / std::sqrt(ss / H + 1e-6f);
      for (int h = 0; h < H; ++h) x[t * H + h] = bf16_to_f32(f32_to_bf16(r[h] * inv * norm_w[h]));
      for (int e = 0; e < E; ++e) {
        double s = 0;
        for (int h = 0; h < H; ++h) s += double(router[std::size_t(e) * H + h]) * x[t * H + h];
        logits[t * E + e] = static_cast<float>(s);
      }
      arch::route_token(&logits[t * E], E, k, true, &ids[t * k], &w[t * k]);
      std::vector<float> sorted(logits.begin() + t * E, logits.begin() + (t + 1) * E);
      std::sort(sorted.rbegin(), sorted.rend());
      clear_margin[t] = k == E || sorted[k - 1] - sorted[k] > 1e-3f;
      for (int j = 0; j < k; ++j) {
        const std::size_t e = ids[t * k + j], slot = std::size_t(t) * k + j;
        std::vector<double> a(I);
        for (int i = 0; i < I; ++i) {
          double g = 0, u = 0;
          for (int h = 0; h < H; ++h) {
            g += double(gu[(e * 2 * I + i) * H + h]) * x[t * H + h];
            u += double(gu[(e * 2 * I + I + i) * H + h]) * x[t * H + h];
          }
          g_pre[slot * I + i] = g;
          u_pre[slot * I + i] = u;
          g += gu_bias[e * 2 * I + i];
          u += gu_bias[e * 2 * I + I + i];
          clamped += limit > 0 && (g > limit || std::abs(u) > limit);
          a[i] = ref_act(g, u, c);
        }
        for (int h = 0; h < H; ++h) {
          double o = dn_bias[e * H + h];
          for (int i = 0; i < I; ++i) o += double(dn[(e * H + h) * I + i]) * a[i];
          y[t * H + h] += static_cast<float>(w[t * k + j] * o);
        }
      }
    }
  }
};

class MoeBlock : public ::testing::TestWithParam<BlockCase> {};
INSTANTIATE_TEST_SUITE_P(Shapes, MoeBlock,
                         ::testing::Values(BlockCase{1, 128, 8, 256, 64, false, 0.0f},
                                           BlockCase{2, 16, 4, 128, 64, true, 2.0f},
                                           BlockCase{4, 60, 4, 128, 96, true, 0.0f},
                                           BlockCase{3, 8, 2, 64, 32, false, 2.0f}));

TEST_P(MoeBlock, FusedDecodeMatchesFloat64) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const Block b(GetParam());
  const auto [T, E, k, H, I, biases, limit] = b.c;
  ASSERT_TRUE(moe_decode_supported(T, H, E, k, I));
  if (limit > 0) {
    EXPECT_GT(b.clamped, 0) << "the clamp was never exercised";
  }
  CudaContext ctx;
  DeviceBuffer d_res = upload(ctx, b.residual), d_nw = upload(ctx, test::to_bf16(b.norm_w)),
               d_router = upload(ctx, test::to_bf16(b.router)),
               d_gu = upload(ctx, test::to_bf16(b.gu)), d_dn = upload(ctx, test::to_bf16(b.dn)),
               d_gub = upload(ctx, b.gu_bias), d_dnb = upload(ctx, b.dn_bias);
  DeviceBuffer d_normed(std::size_t(T) * H * 2), d_logits(std::size_t(T) * E * 4),
      d_ids(std::size_t(T) * k * 4), d_w(std::size_t(T) * k * 4), d_act(std::size_t(T) * k * I * 2),
      d_counter(4);
  test::poison(ctx, d_ids);
  KEEL_CUDA_CHECK(cudaMemsetAsync(d_counter.data(), 0, 4, ctx.compute().get("memset")));
  MoeDecodeParams p;
  p.T = T, p.H = H, p.E = E, p.k = k, p.I = I;
  p.residual = d_res.as<float>();
  p.norm_weight = d_nw.as<bf16>();
  p.eps = 1e-6f;
  p.router = d_router.as<bf16>();
  p.gate_up = d_gu.as<bf16>();
  p.down = d_dn.as<bf16>();
  if (biases) {
    p.act_fn.gate_up_bias = d_gub.as<float>();
    p.act_fn.down_bias = d_dnb.as<float>();
  }
  p.act_fn.limit = limit;
  p.normed = d_normed.as<bf16>();
  p.logits = d_logits.as<float>();
  p.ids = d_ids.as<std::int32_t>();
  p.weights = d_w.as<float>();
  p.act = d_act.as<bf16>();
  p.counter = d_counter.as<unsigned>();
  // Twice on the same residual copy: the second run checks that the router's block
  // counter was reset (a stale counter would leave the ids of the first run unrouted).
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer d_run = upload(ctx, b.residual);
    p.residual = d_run.as<float>();
    test::poison(ctx, d_ids);
    launch_moe_decode_router(ctx.compute(), p);
    launch_moe_decode_gate_up(ctx.compute(), p);
    launch_moe_decode_down(ctx.compute(), p);
    const auto ids = download<std::int32_t>(ctx, d_ids, std::size_t(T) * k);
    const auto w = download<float>(ctx, d_w, std::size_t(T) * k);
    const auto out = download<float>(ctx, d_run, std::size_t(T) * H);
    const auto normed = test::from_bf16(download<std::uint16_t>(ctx, d_normed, std::size_t(T) * H));
    EXPECT_LT(test::rel_err(normed, b.x), 1e-2) << "run " << run;
    for (int t = 0; t < T; ++t) {
      if (!b.clear_margin[t]) continue;
      for (int j = 0; j < k; ++j) {
        ASSERT_EQ(ids[t * k + j], b.ids[t * k + j]) << "run " << run << " token " << t;
        EXPECT_NEAR(w[t * k + j], b.w[t * k + j], 1e-4f) << "token " << t;
      }
    }
    // A token whose k-th choice is within rounding of the next may take another expert.
    if (!std::all_of(b.clear_margin.begin(), b.clear_margin.end(), [](bool v) { return v; }))
      continue;
    std::vector<float> y(out.size());
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = out[i] - b.residual[i];
    EXPECT_LT(test::rel_err(y, b.y), 2e-2) << "run " << run;
  }
}

TEST_P(MoeBlock, GatherGemvAndGemmActivationMatchFloat64) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const Block b(GetParam());
  const auto [T, E, k, H, I, biases, limit] = b.c;
  const int S = T * k;
  CudaContext ctx;
  const DeviceBuffer d_x = upload(ctx, test::to_bf16(b.x)), d_logits = upload(ctx, b.logits),
                     d_gu = upload(ctx, test::to_bf16(b.gu)),
                     d_dn = upload(ctx, test::to_bf16(b.dn)), d_gub = upload(ctx, b.gu_bias),
                     d_dnb = upload(ctx, b.dn_bias);
  MoeExpertAct ea;
  if (biases) {
    ea.gate_up_bias = d_gub.as<float>();
    ea.down_bias = d_dnb.as<float>();
  }
  ea.limit = limit;
  const StreamRef s = ctx.compute();
  DeviceBuffer d_ids(S * 4), d_w(S * 4);
  launch_moe_route(s, d_logits.as<float>(), T, E, k, true, d_ids.as<std::int32_t>(),
                   d_w.as<float>());
  {  // the gather-GEMVs and the combine
    const MoeGroupLayout L{E, S, moe_rows_cap(S, E, 1)};
    DeviceBuffer d_group(L.ints() * 4), d_act(L.rows_cap * I * 2), d_out(L.rows_cap * H * 2),
        d_y(std::size_t(T) * H * 2);
    const auto *group = d_group.as<std::int32_t>();
    launch_moe_group(s, d_ids.as<std::int32_t>(), S, E, k, 1, L.rows_cap,
                     d_group.as<std::int32_t>());
    launch_moe_gate_up_gemv(s, d_x.as<bf16>(), d_gu.as<bf16>(), H, I, group, L, std::min(E, S),
                            d_act.as<bf16>(), ea);
    launch_moe_down_gemv(s, d_act.as<bf16>(), d_dn.as<bf16>(), H, I, group, L, std::min(E, S),
                         d_out.as<bf16>());
    launch_moe_combine(s, d_out.as<bf16>(), d_ids.as<std::int32_t>(), d_w.as<float>(), T, k, H,
                       group, L, d_y.as<bf16>(), ea.down_bias);
    const auto y = test::from_bf16(download<std::uint16_t>(ctx, d_y, std::size_t(T) * H));
    EXPECT_LT(test::rel_err(y, b.y), 2e-2);
  }
  {  // the GEMM path's activation over grouped rows (groups padded to 32 rows)
    const MoeGroupLayout L{E, S, moe_rows_cap(S, E, 32)};
    DeviceBuffer d_group(L.ints() * 4), d_act(L.rows_cap * I * 2);
    launch_moe_group(s, d_ids.as<std::int32_t>(), S, E, k, 32, L.rows_cap,
                     d_group.as<std::int32_t>());
    const auto group = download<std::int32_t>(ctx, d_group, L.ints());
    const auto ids = download<std::int32_t>(ctx, d_ids, S);
    // gu rows as the GEMMs would leave them: each slot's projections without biases.
    std::vector<float> gu(L.rows_cap * 2 * I, 0.0f);
    for (int slot = 0; slot < S; ++slot) {
      const int r = group[L.slot_row() + slot];
      for (int i = 0; i < I; ++i) {
        gu[std::size_t(r) * 2 * I + i] = static_cast<float>(b.g_pre[std::size_t(slot) * I + i]);
        gu[std::size_t(r) * 2 * I + I + i] = static_cast<float>(b.u_pre[std::size_t(slot) * I + i]);
      }
    }
    const auto gu_b = test::to_bf16(gu);
    const DeviceBuffer d_gurows = upload(ctx, gu_b);
    test::poison(ctx, d_act);
    launch_moe_act(s, d_gurows.as<bf16>(), I, d_group.as<std::int32_t>(), L, ea, d_act.as<bf16>());
    const auto act = test::from_bf16(download<std::uint16_t>(ctx, d_act, L.rows_cap * I));
    std::vector<float> got, want;
    for (int slot = 0; slot < S; ++slot) {
      const int r = group[L.slot_row() + slot];
      const std::size_t e = ids[slot];
      for (int i = 0; i < I; ++i) {
        const double g = bf16_to_f32(gu_b[std::size_t(r) * 2 * I + i]) + b.gu_bias[e * 2 * I + i];
        const double u =
            bf16_to_f32(gu_b[std::size_t(r) * 2 * I + I + i]) + b.gu_bias[e * 2 * I + I + i];
        got.push_back(act[std::size_t(r) * I + i]);
        want.push_back(static_cast<float>(ref_act(g, u, b.c)));
      }
    }
    EXPECT_LT(test::rel_err(got, want), 1e-2);
  }
}

TEST(MoeDecode, RefusesShapesItCannotRun) {
  EXPECT_FALSE(moe_decode_supported(kMoeDecodeMaxT + 1, 2048, 128, 8, 768));
  EXPECT_FALSE(moe_decode_supported(1, 2044, 128, 8, 768));  // H % 8
  EXPECT_FALSE(moe_decode_supported(1, 2048, kMoeMaxExperts + 1, 8, 768));
  EXPECT_FALSE(moe_decode_supported(4, 8192, 128, 8, 768));  // 64 KB of staged input
  EXPECT_TRUE(moe_decode_supported(2, 2880, 128, 4, 2880));  // gpt-oss-120b
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  MoeDecodeParams p;
  p.T = 1, p.H = 2044, p.E = 8, p.k = 2, p.I = 64;
  EXPECT_THROW(launch_moe_decode_router(ctx.compute(), p), Error);
}

}  // namespace
}  // namespace keel::cuda
