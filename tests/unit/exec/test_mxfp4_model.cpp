// Tiny MXFP4 models on the CPU runner: a dense llama GGUF (every linear weight MXFP4), a
// qwen3_moe with gpt-oss-style expert pairs and a qwen3_moe GGUF with stacked MXFP4 experts
// give the logits of the runner fed the same weights dequantized to f32, within the 8-bit
// activation rounding of the integer MXFP4 kernels, and the same greedy tokens wherever
// the f32 runner's top two logits are further apart than that rounding.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "exec/cpu/cpu_model_runner.h"
#include "formats/make_model.h"
#include "formats/model_weights.h"
#include "formats/quant.h"

namespace keel::cpu {
namespace {

namespace fs = std::filesystem;

struct Runners {
  std::unique_ptr<ModelWeights> weights;
  std::map<std::string, std::vector<float>> f32;
  std::unique_ptr<CpuModelRunner> mx, ref;
};

void open_both(const fs::path &model, ExecContext &x, Runners &r, bool &saw_mxfp4) {
  r.mx = CpuModelRunner::open(model, x, KvOptions{8, 16});
  r.weights = ModelWeights::open(model);
  arch::WeightLookup lookup = [&](const std::string &name) -> std::optional<TensorView> {
    const TensorView *t = r.weights->find(name);
    if (!t) return std::nullopt;
    saw_mxfp4 |= t->dtype == DType::kMXFP4;
    auto &v = r.f32[name];
    if (v.empty()) v = dequantize(*t);
    TensorView f = *t;
    f.dtype = DType::kF32;
    f.data = reinterpret_cast<const std::byte *>(v.data());
    f.nbytes = v.size() * sizeof(float);
    return f;
  };
  r.ref =
      std::make_unique<CpuModelRunner>(r.weights->config(), lookup, nullptr, x, KvOptions{8, 16});
}

// Relative error of logits from 8-bit activations against f32 ones (measured 0.06-0.9% on these
// models).
constexpr double kActivationRounding = 2e-2;

double rel_err(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

TokenId argmax(const std::vector<float> &v, std::size_t from = 0) {
  return static_cast<TokenId>(std::max_element(v.begin() + from, v.end()) - v.begin() - from);
}

void check(const MakeModelOptions &mo) {
  make_model(mo);
  ExecContext x(2);
  Runners r;
  bool saw_mxfp4 = false;
  open_both(mo.out, x, r, saw_mxfp4);
  EXPECT_TRUE(saw_mxfp4);
  const std::int64_t V = r.mx->config().vocab_size;
  ForwardBatch b;
  for (int i = 0; i < 20; ++i) b.tokens.push_back((i * 37 + 3) % 500);
  b.seqs.push_back({0, 20, 0, 0, 2, SequenceSlice::Logits::kAll});
  b.block_table = {1, 0};
  ForwardOutput a, c;
  r.mx->forward(b, a);
  r.ref->forward(b, c);
  ASSERT_EQ(a.logits.size(), static_cast<std::size_t>(20 * V));
  for (float v : a.logits) ASSERT_TRUE(std::isfinite(v));
  std::printf("logits rel err vs f32 weights: %.4f\n", rel_err(a.logits, c.logits));
  EXPECT_LT(rel_err(a.logits, c.logits), kActivationRounding);
  EXPECT_GT(rel_err(a.logits, std::vector<float>(a.logits.size(), 0.0f)), 0.5);  // not all zero
  // Greedy decode, both fed the f32 runner's tokens.
  ForwardBatch d;
  d.tokens = {argmax(c.logits, static_cast<std::size_t>(19 * V))};
  d.seqs.push_back({0, 1, 20, 0, 2, SequenceSlice::Logits::kLast});
  d.block_table = {1, 0};
  int compared = 0;
  for (int step = 0; step < 8; ++step) {
    ForwardOutput la, lc;
    r.mx->forward(d, la);
    r.ref->forward(d, lc);
    const TokenId ia = argmax(la.logits), ic = argmax(lc.logits);
    float second = -1e30f;
    for (std::size_t i = 0; i < lc.logits.size(); ++i)
      if (static_cast<TokenId>(i) != ic) second = std::max(second, lc.logits[i]);
    if (lc.logits[ic] - second > 4 * kActivationRounding * std::abs(lc.logits[ic])) {
      EXPECT_EQ(ia, ic) << "step " << step;
      ++compared;
    }
    d.tokens = {ic};
    d.seqs[0].start_pos += 1;
  }
  EXPECT_GT(compared, 0);
  fs::remove_all(mo.out);
}

MakeModelOptions options(const std::string &arch, bool gguf, const std::string &name) {
  MakeModelOptions mo;
  mo.arch = arch;
  mo.shape = "tiny";
  mo.dtype = DType::kMXFP4;
  mo.gguf = gguf;
  mo.seed = 7;
  mo.threads = 1;
  mo.out = fs::temp_directory_path() / (name + std::to_string(::getpid()) + (gguf ? ".gguf" : ""));
  return mo;
}

TEST(Mxfp4Model, DenseGgufEqualsItsDequantizedWeights) {
  check(options("llama", true, "keel_mxfp4_dense_"));
}

TEST(Mxfp4Model, MoeWithGptOssExpertPairsEqualsItsDequantizedWeights) {
  check(options("qwen3_moe", false, "keel_mxfp4_moe_"));
}

TEST(Mxfp4Model, MoeGgufEqualsItsDequantizedWeights) {
  check(options("qwen3_moe", true, "keel_mxfp4_moe_gguf_"));
}

}  // namespace
}  // namespace keel::cpu
