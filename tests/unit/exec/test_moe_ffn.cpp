// The CPU mixture-of-experts block against a float64 reference computed here from the
// definition (softmax router, top-k, optional renormalization, SwiGLU experts, weighted
// sum), its batch invariance, and its errors on bad checkpoints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "core/error.h"
#include "exec/arch/moe_ffn.h"
#include "formats/quant.h"
#include "moe_layer_util.h"

namespace keel::arch {
namespace {

using test::random_input;
using test::run;

// An in-memory checkpoint of one MoE layer (layer 0), f32, addressed by HF name.
struct Layer : test::F32Tensors {
  ModelConfig cfg;

  Layer(std::int64_t hidden, std::int64_t E, std::int64_t k, std::int64_t I, bool norm,
        std::uint32_t seed, MoeConfig::Naming naming = MoeConfig::Naming::kQwen) {
    cfg.hidden_size = hidden;
    cfg.num_layers = 1;
    MoeConfig m;
    m.naming = naming;
    m.num_experts = E, m.top_k = k, m.expert_intermediate = I, m.norm_topk_prob = norm;
    m.sparse_layers = {true};
    cfg.moe = m;
    rng.seed(seed);
    add(moe_router_name(m, 0), {E, hidden}, 2.0f / std::sqrt(static_cast<float>(hidden)));
    for (std::int64_t e = 0; e < E; ++e) {
      const float s = 1.0f / std::sqrt(static_cast<float>(hidden));
      add(moe_expert_name(m, 0, e, ExpertMatrix::kGate), {I, hidden}, s);
      add(moe_expert_name(m, 0, e, ExpertMatrix::kUp), {I, hidden}, s);
      add(moe_expert_name(m, 0, e, ExpertMatrix::kDown), {hidden, I},
          1.0f / std::sqrt(static_cast<float>(I)));
    }
  }

  // Stores the experts as MXFP4 (formats/mxfp4.h) and replaces their float values by the
  // dequantized ones, so that reference() computes with the weights the layer reads.
  void to_mxfp4() {
    const MoeConfig &m = *cfg.moe;
    for (std::int64_t e = 0; e < m.num_experts; ++e)
      for (ExpertMatrix which : {ExpertMatrix::kGate, ExpertMatrix::kUp, ExpertMatrix::kDown}) {
        const std::string name = moe_expert_name(m, 0, e, which);
        auto &v = data.at(name);
        const auto n = static_cast<std::int64_t>(v.size());
        auto &q = mxfp4[name];
        q.resize(static_cast<std::size_t>(dtype_bytes(DType::kMXFP4, n)));
        quantize_row(DType::kMXFP4, v.data(), q.data(), n);
        dequantize_row(DType::kMXFP4, q.data(), v.data(), n);
      }
  }
  std::map<std::string, std::vector<std::byte>> mxfp4;  // name -> blocks, when quantized

  WeightLookup lookup() const {
    return [this](const std::string &name) -> std::optional<TensorView> {
      auto it = data.find(name);
      if (it == data.end()) return std::nullopt;
      if (auto q = mxfp4.find(name); q != mxfp4.end())
        return TensorView{name, DType::kMXFP4, shape.at(name), q->second.data(), q->second.size()};
      return view(name);
    };
  }

  const std::vector<float> &w(std::int64_t e, ExpertMatrix m) const {
    return data.at(moe_expert_name(*cfg.moe, 0, e, m));
  }

  // y = sum over the top-k experts of weight * down(silu(gate x) * up x), all in double.
  std::vector<double> reference(const std::vector<float> &x, std::int64_t T) const {
    const MoeConfig &m = *cfg.moe;
    const std::int64_t H = cfg.hidden_size, E = m.num_experts, I = m.expert_intermediate;
    const auto &router = data.at(moe_router_name(m, 0));
    std::vector<double> y(static_cast<std::size_t>(T * H), 0.0);
    for (std::int64_t t = 0; t < T; ++t) {
      const float *xt = x.data() + t * H;
      std::vector<double> logit(E), p(E);
      for (std::int64_t e = 0; e < E; ++e) {
        double s = 0;
        for (std::int64_t c = 0; c < H; ++c) s += static_cast<double>(router[e * H + c]) * xt[c];
        logit[e] = s;
      }
      const double mx = *std::max_element(logit.begin(), logit.end());
      double z = 0;
      for (std::int64_t e = 0; e < E; ++e) z += std::exp(logit[e] - mx);
      for (std::int64_t e = 0; e < E; ++e) p[e] = std::exp(logit[e] - mx) / z;
      std::vector<std::int64_t> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](std::int64_t a, std::int64_t b) { return logit[a] > logit[b]; });
      double chosen = 0;
      for (std::int64_t j = 0; j < m.top_k; ++j) chosen += p[order[j]];
      for (std::int64_t j = 0; j < m.top_k; ++j) {
        const std::int64_t e = order[j];
        const double wt = m.norm_topk_prob ? p[e] / chosen : p[e];
        const auto &G = w(e, ExpertMatrix::kGate), &U = w(e, ExpertMatrix::kUp),
                   &D = w(e, ExpertMatrix::kDown);
        std::vector<double> act(I);
        for (std::int64_t i = 0; i < I; ++i) {
          double g = 0, u = 0;
          for (std::int64_t c = 0; c < H; ++c) {
            g += static_cast<double>(G[i * H + c]) * xt[c];
            u += static_cast<double>(U[i * H + c]) * xt[c];
          }
          act[i] = g / (1.0 + std::exp(-g)) * u;
        }
        for (std::int64_t c = 0; c < H; ++c) {
          double s = 0;
          for (std::int64_t i = 0; i < I; ++i) s += static_cast<double>(D[c * I + i]) * act[i];
          y[t * H + c] += wt * s;
        }
      }
    }
    return y;
  }
};

void expect_matches_reference(bool norm, std::int64_t k, bool mxfp4 = false) {
  const std::int64_t H = 64, E = 8, I = 32, T = 40;
  Layer layer(H, E, k, I, norm, 11 + static_cast<std::uint32_t>(k));
  if (mxfp4) layer.to_mxfp4();
  MoeFfn moe(layer.cfg, 0, layer.lookup());
  ThreadPool pool(3);
  const auto x = random_input(T, H, 5);
  const auto y = run(moe, x, T, H, pool);
  const auto ref = layer.reference(x, T);
  const auto [worst, scale] = test::distance(y, ref);
  EXPECT_GT(scale, 0.1);  // the outputs are not trivially small
  // MXFP4 experts multiply 8-bit activations (as Q4_0 does): their rounding, not f32's.
  EXPECT_LT(worst, (mxfp4 ? 3e-2 : 1e-5) * scale) << "worst abs error " << worst << " of " << scale;

  // The routing really spreads these tokens: every expert gets some.
  std::set<std::int32_t> used;
  const auto &router = layer.data.at(moe_router_name(*layer.cfg.moe, 0));
  for (std::int64_t t = 0; t < T; ++t) {
    std::vector<float> logits(E);
    for (std::int64_t e = 0; e < E; ++e) {
      double s = 0;
      for (std::int64_t c = 0; c < H; ++c)
        s += static_cast<double>(router[e * H + c]) * x[t * H + c];
      logits[e] = static_cast<float>(s);
    }
    std::vector<std::int32_t> ids(k);
    std::vector<float> w(k);
    route_token(logits.data(), E, k, norm, ids.data(), w.data());
    used.insert(ids.begin(), ids.end());
  }
  EXPECT_EQ(used.size(), static_cast<std::size_t>(E));
}

TEST(MoeFfn, MatchesFloat64ReferenceNormalizedTopK) { expect_matches_reference(true, 2); }
TEST(MoeFfn, MatchesFloat64ReferenceUnnormalizedTopK) { expect_matches_reference(false, 3); }
// gpt-oss's expert format: each chosen expert's slice of MXFP4 blocks.
TEST(MoeFfn, Mxfp4ExpertsMatchFloat64Reference) { expect_matches_reference(true, 2, true); }

// T = 9: few rows per expert, the threads split the experts; T = 200: many, each
// expert is split by rows. A row alone (the first path) gives the same bits in both.
class MoeFfnBatch : public ::testing::TestWithParam<std::int64_t> {};
INSTANTIATE_TEST_SUITE_P(Sizes, MoeFfnBatch, ::testing::Values(9, 200));

TEST_P(MoeFfnBatch, BatchInvariant) {
  const std::int64_t H = 64, T = GetParam();
  Layer layer(H, 8, 2, 32, true, 3);
  MoeFfn moe(layer.cfg, 0, layer.lookup());
  ThreadPool pool(3);
  const auto x = random_input(T, H, 9);
  const auto all = run(moe, x, T, H, pool);
  for (std::int64_t t = 0; t<T; t += T> 20 ? 13 : 1) {
    const std::vector<float> one(x.begin() + t * H, x.begin() + (t + 1) * H);
    const auto y = run(moe, one, 1, H, pool);
    for (std::int64_t c = 0; c < H; ++c) ASSERT_EQ(y[c], all[t * H + c]) << t << "," << c;
  }
}

TEST(MoeFfn, RouteTokenPicksTopKAndBreaksTiesByIndex) {
  const float logits[] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  std::int32_t ids[3];
  float w[3];
  route_token(logits, 5, 3, true, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 2);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0f, 1e-6f);
  EXPECT_FLOAT_EQ(w[0], w[1]);
  route_token(logits, 5, 3, false, ids, w);
  const double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0) + std::exp(-1.0);
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(2.0) / z, 1e-6);
}

TEST(MoeFfn, MixtralNames) {
  Layer layer(32, 4, 2, 16, true, 4, MoeConfig::Naming::kMixtral);
  EXPECT_TRUE(layer.data.count("model.layers.0.block_sparse_moe.experts.3.w2.weight"));
  MoeFfn moe(layer.cfg, 0, layer.lookup());
  EXPECT_EQ(moe.experts().size(), 4u);
}

std::string load_error(const Layer &layer) {
  try {
    MoeFfn moe(layer.cfg, 0, layer.lookup());
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    return e.what();
  }
  return "";
}

TEST(MoeFfn, MissingExpertNamesTheTensor) {
  Layer layer(32, 4, 2, 16, true, 5);
  layer.data.erase("model.layers.0.mlp.experts.2.up_proj.weight");
  EXPECT_NE(load_error(layer).find("model.layers.0.mlp.experts.2.up_proj.weight: tensor missing"),
            std::string::npos);
}

TEST(MoeFfn, FewerExpertsThanTheConfigNamesTheFirstMissing) {
  Layer more(32, 6, 2, 16, true, 6);  // the config says 6, the router has 6 rows, 4 experts
  for (int e = 4; e < 6; ++e)
    for (auto m : {ExpertMatrix::kGate, ExpertMatrix::kUp, ExpertMatrix::kDown})
      more.data.erase(moe_expert_name(*more.cfg.moe, 0, e, m));
  EXPECT_NE(load_error(more).find("model.layers.0.mlp.experts.4.gate_proj.weight"),
            std::string::npos);
}

TEST(MoeFfn, MisShapedExpertNamesTheTensorAndShapes) {
  Layer layer(32, 4, 2, 16, true, 7);
  layer.shape["model.layers.0.mlp.experts.1.down_proj.weight"] = {16, 32};
  const std::string e = load_error(layer);
  EXPECT_NE(e.find("model.layers.0.mlp.experts.1.down_proj.weight: shape [16, 32] where [32, 16]"),
            std::string::npos)
      << e;
}

TEST(MoeFfn, RouterWidthMismatchNamesTheRouter) {
  Layer layer(32, 4, 2, 16, true, 8);
  layer.cfg.moe->num_experts = 5;  // the router has 4 rows
  const std::string e = load_error(layer);
  EXPECT_NE(e.find("model.layers.0.mlp.gate.weight: shape [4, 32] where [5, 32]"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace keel::arch
