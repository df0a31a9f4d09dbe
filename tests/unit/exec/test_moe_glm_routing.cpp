// GLM-4.5's mixture of experts on the CPU: the grouped sigmoid router with its
// score-correction bias (chooses, never weights), and a whole block with a shared
// expert against a float64 reference computed here from transformers' definition.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "exec/arch/moe_ffn.h"
#include "moe_layer_util.h"

namespace keel::arch {
namespace {

using test::random_input;
using test::run;

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(GlmRouting, CorrectionBiasChoosesButDoesNotWeight) {
  // Two groups of four. Expert 1's bias lifts it (and so group 0) above group 1.
  const float logits[] = {2.0f, -1.0f, 0.5f, 0.0f, 1.0f, 1.5f, -2.0f, 0.2f};
  float bias[8] = {};
  bias[1] = 2.0f;
  std::int32_t ids[2];
  float w[2];
  route_token_grouped_sigmoid(logits, bias, 8, 2, 2, 1, true, 2.5, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 0);
  const double s1 = sigmoid(-1.0), s0 = sigmoid(2.0);
  EXPECT_NEAR(w[0], 2.5 * s1 / (s0 + s1), 1e-6);  // the uncorrected score
  EXPECT_NEAR(w[1], 2.5 * s0 / (s0 + s1), 1e-6);

  // Without the bias, group 1 (1.5, 1.0) beats group 0 (2.0, 0.5) and its best two win;
  // unnormalized weights are the scores times the scale.
  route_token_grouped_sigmoid(logits, nullptr, 8, 2, 2, 1, false, 1.5, ids, w);
  EXPECT_EQ(ids[0], 5);
  EXPECT_EQ(ids[1], 4);
  EXPECT_NEAR(w[0], 1.5 * sigmoid(1.5), 1e-6);
  EXPECT_NEAR(w[1], 1.5 * sigmoid(1.0), 1e-6);

  // One group: plain top-k by corrected score (1: 2.27, 0: 0.88, 5: 0.82).
  std::int32_t ids3[3];
  float w3[3];
  route_token_grouped_sigmoid(logits, bias, 8, 3, 1, 1, true, 1.0, ids3, w3);
  EXPECT_EQ(ids3[0], 1);
  EXPECT_EQ(ids3[1], 0);
  EXPECT_EQ(ids3[2], 5);
  EXPECT_NEAR(w3[0] + w3[1] + w3[2], 1.0, 1e-6);
}

// One GLM MoE layer (layer 0), f32, addressed by HF name.
struct GlmLayer : test::F32Tensors {
  ModelConfig cfg;

  GlmLayer(std::int64_t H, std::int64_t E, std::int64_t k, std::int64_t I, std::int64_t S,
           std::int64_t groups, std::int64_t keep, std::uint32_t seed) {
    cfg.hidden_size = H;
    cfg.num_layers = 1;
    MoeConfig m;
    m.scoring = MoeConfig::Scoring::kSigmoid;
    m.num_experts = E, m.top_k = k, m.expert_intermediate = I, m.norm_topk_prob = true;
    m.n_group = groups, m.topk_group = keep, m.routed_scaling_factor = 2.5;
    m.shared_intermediate = S;
    m.sparse_layers = {true};
    cfg.moe = m;
    rng.seed(seed);
    const float sh = 1.0f / std::sqrt(static_cast<float>(H));
    add(moe_router_name(m, 0), {E, H}, 2.0f * sh);
    add(moe_router_bias_name(m, 0), {E}, 0.1f);
    for (std::int64_t e = 0; e < E; ++e) {
      add(moe_expert_name(m, 0, e, ExpertMatrix::kGate), {I, H}, sh);
      add(moe_expert_name(m, 0, e, ExpertMatrix::kUp), {I, H}, sh);
      add(moe_expert_name(m, 0, e, ExpertMatrix::kDown), {H, I},
          1.0f / std::sqrt(static_cast<float>(I)));
    }
    add(moe_shared_name(m, 0, ExpertMatrix::kGate), {S, H}, sh);
    add(moe_shared_name(m, 0, ExpertMatrix::kUp), {S, H}, sh);
    add(moe_shared_name(m, 0, ExpertMatrix::kDown), {H, S},
        1.0f / std::sqrt(static_cast<float>(S)));
  }

  // down(silu(gate x) * up x) of one SwiGLU MLP, in double.
  std::vector<double> mlp(const std::string &g, const std::string &u, const std::string &d,
                          std::int64_t I, const float *x) const {
    const std::int64_t H = cfg.hidden_size;
    const auto &G = data.at(g), &U = data.at(u), &D = data.at(d);
    std::vector<double> act(I), y(H, 0.0);
    for (std::int64_t i = 0; i < I; ++i) {
      double a = 0, b = 0;
      for (std::int64_t c = 0; c < H; ++c) {
        a += static_cast<double>(G[i * H + c]) * x[c];
        b += static_cast<double>(U[i * H + c]) * x[c];
      }
      act[i] = a * sigmoid(a) * b;
    }
    for (std::int64_t c = 0; c < H; ++c)
      for (std::int64_t i = 0; i < I; ++i) y[c] += static_cast<double>(D[c * I + i]) * act[i];
    return y;
  }

  // transformers' Glm4MoeMoE.forward, token by token, in double; also the experts used.
  std::vector<double> reference(const std::vector<float> &x, std::int64_t T,
                                std::set<std::int64_t> &used) const {
    const MoeConfig &m = *cfg.moe;
    const std::int64_t H = cfg.hidden_size, E = m.num_experts, per = E / m.n_group;
    const auto &router = data.at(moe_router_name(m, 0));
    const auto &bias = data.at(moe_router_bias_name(m, 0));
    std::vector<double> y(static_cast<std::size_t>(T * H), 0.0);
    for (std::int64_t t = 0; t < T; ++t) {
      const float *xt = x.data() + t * H;
      std::vector<double> s(E), choice(E);
      for (std::int64_t e = 0; e < E; ++e) {
        double z = 0;
        for (std::int64_t c = 0; c < H; ++c) z += static_cast<double>(router[e * H + c]) * xt[c];
        s[e] = sigmoid(z);
        choice[e] = s[e] + bias[e];
      }
      std::vector<double> gscore(m.n_group);
      for (std::int64_t g = 0; g < m.n_group; ++g) {
        std::vector<double> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
        std::sort(v.rbegin(), v.rend());
        gscore[g] = v[0] + v[1];
      }
      std::vector<std::int64_t> gorder(m.n_group);
      std::iota(gorder.begin(), gorder.end(), 0);
      std::stable_sort(gorder.begin(), gorder.end(),
                       [&](std::int64_t a, std::int64_t b) { return gscore[a] > gscore[b]; });
      std::vector<double> masked(E, 0.0);
      for (std::int64_t j = 0; j < m.topk_group; ++j)
        for (std::int64_t e = gorder[j] * per; e < (gorder[j] + 1) * per; ++e)
          masked[e] = choice[e];
      std::vector<std::int64_t> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](std::int64_t a, std::int64_t b) { return masked[a] > masked[b]; });
      std::vector<std::int64_t> top(order.begin(), order.begin() + m.top_k);
      std::sort(top.begin(), top.end());  // transformers sums experts in index order
      double sum = 0;
      for (std::int64_t e : top) sum += s[e];
      for (std::int64_t e : top) {
        used.insert(e);
        const auto o =
            mlp(moe_expert_name(m, 0, e, ExpertMatrix::kGate),
                moe_expert_name(m, 0, e, ExpertMatrix::kUp),
                moe_expert_name(m, 0, e, ExpertMatrix::kDown), m.expert_intermediate, xt);
        const double wt = s[e] / (sum + 1e-20) * m.routed_scaling_factor;
        for (std::int64_t c = 0; c < H; ++c) y[t * H + c] += wt * o[c];
      }
      const auto sh =
          mlp(moe_shared_name(m, 0, ExpertMatrix::kGate), moe_shared_name(m, 0, ExpertMatrix::kUp),
              moe_shared_name(m, 0, ExpertMatrix::kDown), m.shared_intermediate, xt);
      for (std::int64_t c = 0; c < H; ++c) y[t * H + c] += sh[c];
    }
    return y;
  }
};

class GlmMoeBlock : public ::testing::TestWithParam<std::int64_t> {};
// T = 9: the threads split the experts; T = 120: each expert split by rows.
INSTANTIATE_TEST_SUITE_P(Sizes, GlmMoeBlock, ::testing::Values(9, 120));

TEST_P(GlmMoeBlock, MatchesFloat64ReferenceAndIsBatchInvariant) {
  const std::int64_t H = 64, T = GetParam();
  GlmLayer layer(H, 8, 2, 32, 16, 4, 2, 21);
  MoeFfn moe(layer.cfg, 0, layer.lookup());
  ThreadPool pool(3);
  const auto x = random_input(T, H, 5);
  const auto y = run(moe, x, T, H, pool);
  std::set<std::int64_t> used;
  const auto ref = layer.reference(x, T, used);
  const auto [worst, scale] = test::distance(y, ref);
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 1e-5 * scale) << "worst abs error " << worst;
  EXPECT_GE(used.size(), 6u);  // the routing spreads over the experts
  for (std::int64_t t = 0; t < T; t += 7) {
    const std::vector<float> one(x.begin() + t * H, x.begin() + (t + 1) * H);
    const auto y1 = run(moe, one, 1, H, pool);
    for (std::int64_t c = 0; c < H; ++c) ASSERT_EQ(y1[c], y[t * H + c]) << t << "," << c;
  }
}

TEST(GlmMoeBlock, MissingCorrectionBiasOrSharedExpertIsNamed) {
  for (const std::string &name :
       {std::string("model.layers.0.mlp.gate.e_score_correction_bias"),
        std::string("model.layers.0.mlp.shared_experts.down_proj.weight")}) {
    GlmLayer layer(32, 4, 2, 16, 16, 2, 1, 3);
    layer.data.erase(name);
    try {
      MoeFfn moe(layer.cfg, 0, layer.lookup());
      ADD_FAILURE() << "no error without " << name;
    } catch (const Error &e) {
      EXPECT_EQ(e.code(), ErrorCode::kFormat);
      EXPECT_NE(std::string(e.what()).find(name + ": tensor missing"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace keel::arch
