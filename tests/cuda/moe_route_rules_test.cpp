// The kernels GLM-4.5 and gpt-oss add to the CUDA runner, each against its CPU
// definition: the grouped sigmoid router (k_moe_route.h) against exec/arch/moe_ffn.h's
// route_token_grouped_sigmoid and gpt-oss's top-k softmax against route_token_topk_softmax, on
// logits and biases full of ties; RoPE of a partial rotary factor against cpu::apply_rope
// (the dimensions past rot_dim untouched, bit for bit); the bf16 add (o_proj bias, shared
// expert) against the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/half.h"
#include "cuda_test_util.h"
#include "exec/arch/moe_ffn.h"
#include "exec/cpu/rope.h"
#include "exec/cuda/k_moe_route.h"
#include "exec/cuda/kernels.h"

namespace keel::cuda {
namespace {

using test::download;
using test::upload;

// Values from a small grid, so rows have many exact ties (equal logits and equal biases
// give equal scores in float and in double alike).
std::vector<float> grid_values(std::size_t n, std::uint32_t seed, float step, int levels) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, levels - 1);
  std::vector<float> v(n);
  for (float &x : v) x = step * static_cast<float>(d(rng) - levels / 2);
  return v;
}

struct SigmoidCase {
  int E, k, n_group, topk_group;
  bool norm;
  double scale;
};
class MoeRouteGroupedSigmoid : public ::testing::TestWithParam<SigmoidCase> {};
INSTANTIATE_TEST_SUITE_P(Shapes, MoeRouteGroupedSigmoid,
                         ::testing::Values(SigmoidCase{8, 2, 2, 1, true, 2.5},    // the tiny model
                                           SigmoidCase{128, 8, 1, 1, true, 1.0},  // GLM-4.5-Air
                                           SigmoidCase{160, 8, 1, 1, true, 2.5},  // GLM-4.5
                                           SigmoidCase{256, 8, 8, 4, true, 2.5},
                                           SigmoidCase{64, 6, 32, 3, false, 1.0},
                                           SigmoidCase{60, 4, 4, 4, true, 1.0}));

TEST_P(MoeRouteGroupedSigmoid, MatchesCpuOnTies) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const SigmoidCase c = GetParam();
  const int T = 400, E = c.E, k = c.k;
  CudaContext ctx;
  const auto logits = grid_values(std::size_t(T) * E, 31 + E, 0.5f, 7);
  // Bias levels below and above zero: a negative corrected score can lose to a masked
  // group's 0, as in transformers.
  const auto bias = grid_values(E, 7 + E, 0.25f, 5);
  const DeviceBuffer d_logits = upload(ctx, logits), d_bias = upload(ctx, bias);
  DeviceBuffer d_ids(T * k * 4), d_w(T * k * 4);
  test::poison(ctx, d_ids);
  MoeRouteParams p;
  p.rule = MoeRouteRule::kGroupedSigmoid;
  p.E = E;
  p.k = k;
  p.norm_topk_prob = c.norm;
  p.n_group = c.n_group;
  p.topk_group = c.topk_group;
  p.scale = c.scale;
  p.bias = d_bias.as<float>();
  launch_moe_route(ctx.compute(), d_logits.as<float>(), T, p, d_ids.as<std::int32_t>(),
                   d_w.as<float>());
  const auto ids = download<std::int32_t>(ctx, d_ids, T * k);
  const auto w = download<float>(ctx, d_w, T * k);
  int boundary_ties = 0;
  for (int t = 0; t < T; ++t) {
    std::vector<std::int32_t> want(k);
    std::vector<float> ww(k);
    const float *row = logits.data() + std::size_t(t) * E;
    arch::route_token_grouped_sigmoid(row, bias.data(), E, k, c.n_group, c.topk_group, c.norm,
                                      c.scale, want.data(), ww.data());
    // A tie at the boundary: an expert left out scored exactly as the last one chosen.
    auto corrected = [&](int e) { return 1.0 / (1.0 + std::exp(-double(row[e]))) + bias[e]; };
    for (int e = 0; e < E; ++e)
      if (std::find(want.begin(), want.end(), e) == want.end() &&
          corrected(e) == corrected(want[k - 1])) {
        ++boundary_ties;
        break;
      }
    for (int j = 0; j < k; ++j) {
      ASSERT_EQ(ids[t * k + j], want[j]) << "token " << t << " choice " << j;
      EXPECT_NEAR(w[t * k + j], ww[j], 1e-6f * (1.0f + std::abs(ww[j]))) << "token " << t;
    }
  }
  EXPECT_GT(boundary_ties, 3);  // ties where they decide something
}

class MoeRouteTopkSoftmax : public ::testing::TestWithParam<std::array<int, 2>> {};
INSTANTIATE_TEST_SUITE_P(Shapes, MoeRouteTopkSoftmax,
                         ::testing::Values(std::array<int, 2>{32, 4},   // gpt-oss-20b
                                           std::array<int, 2>{128, 4},  // gpt-oss-120b
                                           std::array<int, 2>{8, 2}, std::array<int, 2>{256, 16}));

TEST_P(MoeRouteTopkSoftmax, MatchesReferenceOnTies) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto [E, k] = GetParam();
  const int T = 400;
  CudaContext ctx;
  const auto logits = grid_values(std::size_t(T) * E, 5 + E, 0.75f, 6);
  const auto bias = grid_values(E, 9 + E, 0.75f, 3);
  const DeviceBuffer d_logits = upload(ctx, logits), d_bias = upload(ctx, bias);
  DeviceBuffer d_ids(T * k * 4), d_w(T * k * 4);
  MoeRouteParams p;
  p.rule = MoeRouteRule::kTopkSoftmax;
  p.E = E;
  p.k = k;
  p.bias = d_bias.as<float>();
  launch_moe_route(ctx.compute(), d_logits.as<float>(), T, p, d_ids.as<std::int32_t>(),
                   d_w.as<float>());
  const auto ids = download<std::int32_t>(ctx, d_ids, T * k);
  const auto w = download<float>(ctx, d_w, T * k);
  int tied_rows = 0;
  for (int t = 0; t < T; ++t) {
    std::vector<std::int32_t> want(k);
    std::vector<float> ww(k);
    // The CPU adds the bias to the router's f32 logits, then routes (MoeFfn::forward).
    std::vector<float> z(E);
    for (int e = 0; e < E; ++e) z[e] = logits[std::size_t(t) * E + e] + bias[e];
    arch::route_token_topk_softmax(z.data(), E, k, want.data(), ww.data());
    for (int e = 0; e < E; ++e)  // an expert left out that scored as the last one chosen
      if (std::find(want.begin(), want.end(), e) == want.end() && z[e] == z[want[k - 1]]) {
        ++tied_rows;
        break;
      }
    float wsum = 0;
    for (int j = 0; j < k; ++j) {
      ASSERT_EQ(ids[t * k + j], want[j]) << "token " << t << " choice " << j;
      EXPECT_NEAR(w[t * k + j], ww[j], 1e-6f) << "token " << t;
      wsum += w[t * k + j];
    }
    EXPECT_NEAR(wsum, 1.0f, 1e-5f);
  }
  EXPECT_GT(tied_rows, 10);
}

TEST(MoeRouteRules, RejectsGroupsThatDoNotDivideTheExperts) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  DeviceBuffer d_logits(16 * 4), d_ids(16), d_w(16);
  MoeRouteParams p;
  p.rule = MoeRouteRule::kGroupedSigmoid;
  p.E = 10;
  p.k = 2;
  p.n_group = 3;
  EXPECT_THROW(launch_moe_route(ctx.compute(), d_logits.as<float>(), 1, p, d_ids.as<std::int32_t>(),
                                d_w.as<float>()),
               Error);
}

// GLM-4.5's partial rotary (half of each head) in both pairings, as the CPU rotates it.
TEST(CudaRopePartial, MatchesCpuAndPassesTheRestThrough) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const int T = 37, nh = 4, nkv = 2, hd = 32, width = (nh + 2 * nkv) * hd;
  for (const RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
    ModelConfig c;
    c.head_dim = hd;
    c.partial_rotary_factor = 0.5;
    c.rope_theta = 10000.0;
    c.rope_style = style;
    const cpu::RopeTable table = cpu::make_rope_table(c);
    ASSERT_EQ(table.rot_dim, hd / 2);
    std::mt19937 rng(3);
    const auto qkv = test::random_bf16_values(std::size_t(T) * width, rng, -2, 2);
    std::vector<std::int32_t> pos(T);
    for (int t = 0; t < T; ++t) pos[t] = 3 * t + (t % 5) * 100;
    DeviceBuffer d_qkv = upload(ctx, test::to_bf16(qkv));
    const DeviceBuffer d_pos = upload(ctx, pos), d_freq = upload(ctx, table.inv_freq);
    launch_rope(ctx.compute(), d_qkv.as<bf16>(), T, width, nh, nkv, hd, d_pos.as<std::int32_t>(),
                d_freq.as<float>(), table.attention_scaling, style == RopeStyle::kInterleaved,
                static_cast<int>(table.rot_dim));
    const auto got = test::from_bf16(download<std::uint16_t>(ctx, d_qkv, std::size_t(T) * width));
    // The CPU on the q and k heads ([T, nh + nkv, hd] each row's first part).
    std::vector<float> want = qkv;
    std::vector<float> heads(std::size_t(nh + nkv) * hd);
    for (int t = 0; t < T; ++t) {
      std::copy_n(qkv.begin() + std::size_t(t) * width, heads.size(), heads.begin());
      cpu::apply_rope(table, heads.data(), 1, nh + nkv, hd, &pos[t]);
      std::copy(heads.begin(), heads.end(), want.begin() + std::size_t(t) * width);
    }
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < width; ++i) {
        const std::size_t at = std::size_t(t) * width + i;
        const int d = i % hd;
        const bool rotated = i < (nh + nkv) * hd && d < table.rot_dim;
        if (rotated)
          ASSERT_NEAR(got[at], want[at], 0.02f + 0.01f * std::abs(want[at]))
              << "token " << t << " element " << i;
        else
          ASSERT_EQ(got[at], qkv[at]) << "token " << t << " element " << i << " must not move";
      }
  }
}

TEST(CudaAddBf16, BiasAndRowsMatchTheHost) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const int rows = 19, cols = 72;
  std::mt19937 rng(8);
  const auto y = test::random_bf16_values(std::size_t(rows) * cols, rng, -4, 4);
  const auto x = test::random_bf16_values(std::size_t(rows) * cols, rng, -4, 4);
  for (const bool broadcast : {true, false}) {
    DeviceBuffer d_y = upload(ctx, test::to_bf16(y));
    const DeviceBuffer d_x = upload(ctx, test::to_bf16(x));
    launch_add_bf16(ctx.compute(), d_y.as<bf16>(), d_x.as<bf16>(), rows, cols, broadcast);
    const auto got = test::from_bf16(download<std::uint16_t>(ctx, d_y, y.size()));
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const std::size_t i = std::size_t(r) * cols + c;
        const float want = bf16_to_f32(f32_to_bf16(y[i] + x[broadcast ? c : i]));
        ASSERT_EQ(got[i], want) << (broadcast ? "bias" : "rows") << " at " << r << "," << c;
      }
  }
}

}  // namespace
}  // namespace keel::cuda
