// gpt-oss's MoE pieces on the CPU: the router (a bias on the logits, the top k chosen and
// softmaxed among themselves, ties to the lower index), the clamped SwiGLU at and beyond
// its limit, and a whole layer with router and expert biases against a float64 reference
// written here from transformers' definition, on the expert-split (decode) and row-split
// (prefill) paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "exec/arch/moe_ffn.h"

namespace keel::arch {
namespace {

TEST(GptOssRouting, SoftmaxOverTheChosenOnly) {
  const float logits[] = {0.5f, 2.0f, -1.0f, 1.0f, 3.0f};
  std::int32_t ids[2];
  float w[2];
  route_token_topk_softmax(logits, 5, 2, ids, w);
  EXPECT_EQ(ids[0], 4);
  EXPECT_EQ(ids[1], 1);
  const double e = std::exp(-1.0);  // exp(2 - 3)
  EXPECT_NEAR(w[0], 1.0 / (1.0 + e), 1e-7);
  EXPECT_NEAR(w[1], e / (1.0 + e), 1e-7);
}

TEST(GptOssRouting, TiesGoToTheLowerIndex) {
  const float logits[] = {1.0f, 4.0f, 4.0f, 1.0f, 4.0f, 0.0f};
  std::int32_t ids[4];
  float w[4];
  route_token_topk_softmax(logits, 6, 4, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(ids[2], 4);
  EXPECT_EQ(ids[3], 0);  // 0 and 3 tie: the lower wins
  const double z = 3.0 + std::exp(-3.0);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(w[j], 1.0 / z, 1e-7);
  EXPECT_NEAR(w[3], std::exp(-3.0) / z, 1e-7);
}

TEST(GptOssSwiglu, ClampsAtTheLimit) {
  const float limit = 7.0f, alpha = 1.702f;
  const float gate[] = {-20.0f, -1.0f, 0.0f, 3.0f, 7.0f, 7.5f, 100.0f, 2.0f, 2.0f};
  const float up[] = {0.5f, 100.0f, 1.0f, -7.0f, -9.0f, 3.0f, 0.0f, 7.0f, 8.0f};
  float out[9];
  clamped_swiglu(gate, up, out, 9, limit, alpha);
  for (int i = 0; i < 9; ++i) {
    const double g = std::min<double>(gate[i], limit);
    const double u = std::clamp<double>(up[i], -limit, limit);
    const double want = (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
    EXPECT_NEAR(out[i], want, 1e-6 * (1.0 + std::fabs(want))) << i;
  }
  // Beyond the limit nothing changes: gate 7.5 and 100 act as 7, up 8 as 7.
  float a[2], b[2];
  const float g1[] = {7.5f, 2.0f}, g2[] = {100.0f, 2.0f}, u1[] = {3.0f, 8.0f}, u2[] = {3.0f, 7.0f};
  clamped_swiglu(g1, u1, a, 2, limit, alpha);
  clamped_swiglu(g2, u2, b, 2, limit, alpha);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_EQ(a[1], b[1]);
  // out may alias gate.
  float g3[] = {3.0f, -2.0f};
  const float u3[] = {1.0f, 2.0f};
  float c[2];
  clamped_swiglu(g3, u3, c, 2, limit, alpha);
  clamped_swiglu(g3, u3, g3, 2, limit, alpha);
  EXPECT_EQ(g3[0], c[0]);
  EXPECT_EQ(g3[1], c[1]);
}

// One gpt-oss MoE layer (layer 0) in memory, f32, under the per-expert names.
struct GptOssLayer {
  ModelConfig cfg;
  std::map<std::string, std::vector<float>> data;
  std::map<std::string, std::vector<std::int64_t>> shape;

  GptOssLayer(std::int64_t H, std::int64_t E, std::int64_t k, std::int64_t I, std::uint32_t seed) {
    cfg.hidden_size = H;
    cfg.num_layers = 1;
    MoeConfig m;
    m.scoring = MoeConfig::Scoring::kTopkSoftmax;
    m.num_experts = E, m.top_k = k, m.expert_intermediate = I;
    m.router_bias = m.expert_bias = true;
    m.swiglu_limit = 7.0;
    m.sparse_layers = {true};
    cfg.moe = m;
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto add = [&](const std::string &name, std::vector<std::int64_t> s, float std) {
      std::int64_t n = 1;
      for (auto d : s) n *= d;
      std::vector<float> v(static_cast<std::size_t>(n));
      for (float &x : v) x = std * nd(rng);
      data[name] = std::move(v);
      shape[name] = std::move(s);
    };
    add(moe_router_name(m, 0), {E, H}, 2.0f / std::sqrt(static_cast<float>(H)));
    add(moe_router_logit_bias_name(m, 0), {E}, 1.0f);
    for (std::int64_t e = 0; e < E; ++e) {
      // Large enough that some gate and up values pass the limit of 7.
      const float s = 4.0f / std::sqrt(static_cast<float>(H));
      add(moe_expert_name(m, 0, e, ExpertMatrix::kGate), {I, H}, s);
      add(moe_expert_name(m, 0, e, ExpertMatrix::kUp), {I, H}, s);
      add(moe_expert_name(m, 0, e, ExpertMatrix::kDown), {H, I},
          1.0f / std::sqrt(static_cast<float>(I)));
      add(moe_expert_bias_name(m, 0, e, ExpertMatrix::kGate), {I}, 1.0f);
      add(moe_expert_bias_name(m, 0, e, ExpertMatrix::kUp), {I}, 1.0f);
      add(moe_expert_bias_name(m, 0, e, ExpertMatrix::kDown), {H}, 1.0f);
    }
  }

  WeightLookup lookup() const {
    return [this](const std::string &name) -> std::optional<TensorView> {
      auto it = data.find(name);
      if (it == data.end()) return std::nullopt;
      TensorView t;
      t.name = name;
      t.dtype = DType::kF32;
      t.shape = shape.at(name);
      t.data = reinterpret_cast<const std::byte *>(it->second.data());
      t.nbytes = it->second.size() * sizeof(float);
      return t;
    };
  }
  const std::vector<float> &at(const std::string &name) const { return data.at(name); }

  // transformers' GptOssMLP in double; counts the gate / up values the clamp changed.
  std::vector<double> reference(const std::vector<float> &x, std::int64_t T,
                                std::int64_t &clamped) const {
    const MoeConfig &m = *cfg.moe;
    const std::int64_t H = cfg.hidden_size, E = m.num_experts, I = m.expert_intermediate;
    const double limit = *m.swiglu_limit, alpha = m.swiglu_alpha;
    const auto &router = at(moe_router_name(m, 0));
    const auto &rb = at(moe_router_logit_bias_name(m, 0));
    std::vector<double> y(static_cast<std::size_t>(T * H), 0.0);
    for (std::int64_t t = 0; t < T; ++t) {
      const float *xt = x.data() + t * H;
      std::vector<double> logit(E);
      for (std::int64_t e = 0; e < E; ++e) {
        double s = rb[e];
        for (std::int64_t c = 0; c < H; ++c) s += static_cast<double>(router[e * H + c]) * xt[c];
        logit[e] = s;
      }
      std::vector<std::int64_t> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](std::int64_t a, std::int64_t b) { return logit[a] > logit[b]; });
      double z = 0;
      for (std::int64_t j = 0; j < m.top_k; ++j) z += std::exp(logit[order[j]] - logit[order[0]]);
      for (std::int64_t j = 0; j < m.top_k; ++j) {
        const std::int64_t e = order[j];
        const double wt = std::exp(logit[e] - logit[order[0]]) / z;
        const auto &G = at(moe_expert_name(m, 0, e, ExpertMatrix::kGate));
        const auto &U = at(moe_expert_name(m, 0, e, ExpertMatrix::kUp));
        const auto &D = at(moe_expert_name(m, 0, e, ExpertMatrix::kDown));
        const auto &gb = at(moe_expert_bias_name(m, 0, e, ExpertMatrix::kGate));
        const auto &ub = at(moe_expert_bias_name(m, 0, e, ExpertMatrix::kUp));
        const auto &db = at(moe_expert_bias_name(m, 0, e, ExpertMatrix::kDown));
        std::vector<double> act(I);
        for (std::int64_t i = 0; i < I; ++i) {
          double g = gb[i], u = ub[i];
          for (std::int64_t c = 0; c < H; ++c) {
            g += static_cast<double>(G[i * H + c]) * xt[c];
            u += static_cast<double>(U[i * H + c]) * xt[c];
          }
          clamped += (g > limit) + (std::fabs(u) > limit);
          g = std::min(g, limit);
          u = std::clamp(u, -limit, limit);
          act[i] = (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
        }
        for (std::int64_t c = 0; c < H; ++c) {
          double s = db[c];
          for (std::int64_t i = 0; i < I; ++i) s += static_cast<double>(D[c * I + i]) * act[i];
          y[t * H + c] += wt * s;
        }
      }
    }
    return y;
  }
};

class GptOssMoeLayer : public ::testing::TestWithParam<std::int64_t> {};

TEST_P(GptOssMoeLayer, MatchesFloat64Reference) {
  const std::int64_t H = 64, E = 8, k = 4, I = 32, T = GetParam();
  GptOssLayer layer(H, E, k, I, 3);
  MoeFfn moe(layer.cfg, 0, layer.lookup());
  ThreadPool pool(3);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(T * H));
  for (float &v : x) v = nd(rng);
  cpu::LinearScratch scratch;
  Workspace ws;
  std::vector<float> y(x.size());
  moe.forward(x.data(), T, y.data(), pool, scratch, ws);
  std::int64_t clamped = 0;
  const auto ref = layer.reference(x, T, clamped);
  EXPECT_GT(clamped, 0);  // the clamp was exercised
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    worst = std::max(worst, std::abs(y[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  EXPECT_GT(scale, 0.1);
  EXPECT_LT(worst, 1e-5 * scale) << "worst abs error " << worst << " of " << scale;
}

// 3 tokens: the threads split the experts; 120: each expert is split by rows.
INSTANTIATE_TEST_SUITE_P(DecodeAndPrefill, GptOssMoeLayer, ::testing::Values(3, 120));

TEST(GptOssMoeLayer, MissingBiasesAreNamed) {
  for (const char *name :
       {"model.layers.0.mlp.gate.bias", "model.layers.0.mlp.experts.5.down_proj.bias"}) {
    GptOssLayer layer(64, 8, 2, 32, 4);
    layer.data.erase(name);
    try {
      MoeFfn moe(layer.cfg, 0, layer.lookup());
      ADD_FAILURE() << name << ": no error";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace keel::arch
