// FP8 e4m3 models from `keel make-model --dtype fp8` (block, channel and tensor scales) on
// the CPU, against the same model with every tensor dequantized to f32. The CPU converts
// each FP8 row to exactly those f32 values and runs them through the float32 tiles, so the
// two agree to rounding noise (1e-4); a wrong scale index or a misread partial block moves
// the log-probabilities by whole nats. Dimensions that are not multiples of 128 make the
// last scale blocks partial.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "exec/cpu/activation.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/single_sequence.h"
#include "formats/make_model.h"
#include "formats/model_weights.h"
#include "formats/quant.h"

namespace keel::test {
namespace {

namespace fs = std::filesystem;

struct F32Weights {
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, TensorView> views;
  arch::WeightLookup lookup() const {
    return [this](const std::string &n) -> std::optional<TensorView> {
      auto it = views.find(n);
      if (it == views.end()) return std::nullopt;
      return it->second;
    };
  }
};

void dequantize_all(const ModelWeights &w, F32Weights &out) {
  for (const auto &name : w.names()) {
    const TensorView *t = w.find(name);
    if (!t) continue;
    auto &v = out.values[name] = dequantize(*t);
    TensorView f;
    f.name = name;
    f.dtype = DType::kF32;
    f.shape = t->shape;
    f.data = reinterpret_cast<const std::byte *>(v.data());
    f.nbytes = v.size() * 4;
    out.views[name] = f;
  }
}

std::vector<float> logprobs(ModelRunner &r) {
  SingleSequence seq(r);
  std::vector<TokenId> ids;
  std::uint32_t s = 9;
  for (int i = 0; i < 24; ++i)
    ids.push_back(static_cast<TokenId>(3 + ((s = s * 1103515245u + 12345u) >> 8) % 500));
  std::vector<float> rows = seq.append(ids, true);
  const std::int64_t V = r.config().vocab_size;
  std::vector<float> lp(V), out;
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
    cpu::log_softmax(rows.data() + i * V, lp.data(), V);
    out.push_back(lp[ids[i + 1]]);
  }
  return out;
}

class CpuFp8 : public ::testing::TestWithParam<std::string> {};

TEST_P(CpuFp8, MatchesDequantizedReference) {
  const fs::path dir =
      fs::temp_directory_path() / ("keel_cpu_fp8_" + GetParam() + std::to_string(::getpid()));
  MakeModelOptions o;
  o.arch = "qwen3";
  o.hidden = 320;  // 2.5 blocks of 128
  o.intermediate = 448;
  o.layers = 2;
  o.heads = 5;
  o.kv_heads = 1;
  o.head_dim = 64;
  o.vocab = 512;
  o.dtype = DType::kF8_E4M3;
  o.fp8_scale = GetParam();
  o.seed = 3;
  o.out = dir;
  o.threads = 1;
  make_model(o);
  auto w = ModelWeights::open(dir);
  ASSERT_TRUE(w->config().fp8);
  const TensorView &q = w->get("model.layers.0.self_attn.q_proj.weight");
  ASSERT_EQ(q.dtype, DType::kF8_E4M3);
  ASSERT_TRUE(q.scale.present());
  if (GetParam() == "block") {
    EXPECT_EQ(q.scale.grid_rows, 3);  // 320 rows in blocks of 128
    EXPECT_EQ(q.scale.grid_cols, 3);
  } else {
    EXPECT_EQ(q.scale.grid_rows, GetParam() == "channel" ? 320 : 1);
    EXPECT_EQ(q.scale.grid_cols, 1);
  }
  EXPECT_EQ(w->get("model.embed_tokens.weight").dtype, DType::kBF16);
  EXPECT_EQ(w->get("lm_head.weight").dtype, DType::kBF16);
  F32Weights f32;
  dequantize_all(*w, f32);
  ExecContext ctx(2);
  auto fp8 = cpu::CpuModelRunner::open(dir, ctx, {8, 16});
  cpu::CpuModelRunner ref(w->config(), f32.lookup(), nullptr, ctx, {8, 16});
  const auto a = logprobs(*fp8), b = logprobs(ref);
  ASSERT_EQ(a.size(), b.size());
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i]));
    d = std::max(d, std::fabs(double(a[i]) - b[i]));
  }
  std::printf("fp8 %s vs dequantized f32: max |dlogprob| = %.3g\n", GetParam().c_str(), d);
  EXPECT_LT(d, 1e-4);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Scales, CpuFp8, ::testing::Values("block", "channel", "tensor"));

}  // namespace
}  // namespace keel::test
