// Tiny GGUF models in the quantized formats people serve (Q8_0, Q4_K_M, Q5_K_M), written
// by `keel make-model`, on the CPU runner and on the CUDA runner with the blocks kept
// quantized on the device (the GEMV dequantizing in registers for decode, the dequantize
// + cuBLASLt path for prefill): the same logprobs within bf16 activation rounding, and
// the same greedy tokens wherever the CPU's top-2 margin is decisive.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <tuple>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "formats/make_model.h"
#include "model/model_harness.h"

namespace keel::cuda {
namespace {

namespace fs = std::filesystem;
using keel::test::BlockHandout;
using keel::test::log_softmax_row;
using keel::test::PagedSeq;
using keel::test::run_step;
using L = SequenceSlice::Logits;

constexpr double kLogprobTol = 0.2;  // as model_vs_reference_test: bf16 activations
constexpr double kMargin = 0.1;

TokenId argmax(const std::vector<float> &v) {
  return static_cast<TokenId>(std::max_element(v.begin(), v.end()) - v.begin());
}

// (dtype, Q*_K_M mix)
class CudaQuantModelVsCpu : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(CudaQuantModelVsCpu, SameLogprobsAndGreedyTokens) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto [dtype, mix] = GetParam();
  const fs::path dir =
      fs::temp_directory_path() / ("keel_cuda_quant_greedy_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  MakeModelOptions mo;
  mo.arch = "llama";
  mo.hidden = 256;
  mo.intermediate = 768;
  mo.layers = 3;
  mo.heads = 4;
  mo.kv_heads = 2;
  mo.head_dim = 64;
  mo.vocab = 512;
  mo.tie = false;
  mo.dtype = dtype;
  mo.k_quant_mix = mix;
  mo.gguf = true;
  mo.seed = 21;
  mo.threads = 1;
  mo.out = dir / "m.gguf";
  make_model(mo);

  CudaContext ctx;
  CudaRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 16;
  o.max_batch_tokens = 64;
  o.max_seqs = 2;
  o.max_logits_rows = 64;
  o.max_model_len = 128;
  o.quantized_weights = QuantizedWeights::kOn;
  auto gpu = CudaModelRunner::open(mo.out, ctx, o);
  EXPECT_EQ(gpu->weight_format(), std::string(dtype_name(dtype)) + (mix ? "+q6_k" : ""));
  ExecContext xctx(2);
  auto cpu = cpu::CpuModelRunner::open(mo.out, xctx, {16, 16});

  PagedSeq g, c;
  for (int i = 0; i < 24; ++i) g.tokens.push_back(static_cast<TokenId>((i * 131 + 7) % 509 + 3));
  c.tokens = g.tokens;
  BlockHandout gb(16, 3), cb(16, 4);
  double worst = 0;
  int rows = 0, decisive = 0;
  auto compare = [&](const ForwardOutput &go, const ForwardOutput &co) {
    ASSERT_EQ(go.row_seq.size(), co.row_seq.size());
    for (std::size_t r = 0; r < co.row_seq.size(); ++r) {
      const auto lg = log_softmax_row(go, r), lc = log_softmax_row(co, r);
      std::vector<int> idx(lc.size());
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + 20, idx.end(),
                        [&](int a, int b) { return lc[a] > lc[b]; });
      for (int k = 0; k < 20; ++k) {
        const double err = std::abs(lg[idx[k]] - lc[idx[k]]);
        worst = std::max(worst, err);
        EXPECT_LT(err, kLogprobTol) << "row " << r << " token " << idx[k];
      }
      ++rows;
      if (lc[idx[0]] - lc[idx[1]] > kMargin) {
        ++decisive;
        EXPECT_EQ(argmax(lg), idx[0]) << "row " << r;
      }
    }
  };
  const auto n = static_cast<std::int32_t>(g.tokens.size());
  auto go = run_step(*gpu, gb, {{&g, n, L::kAll}});
  auto co = run_step(*cpu, cb, {{&c, n, L::kAll}});
  compare(go, co);
  for (int step = 0; step < 10; ++step) {  // decode the CPU's greedy tokens on both
    const TokenId t = argmax(log_softmax_row(co, co.row_seq.size() - 1));
    g.tokens.push_back(t);
    c.tokens.push_back(t);
    go = run_step(*gpu, gb, {{&g, 1, L::kLast}});
    co = run_step(*cpu, cb, {{&c, 1, L::kLast}});
    compare(go, co);
  }
  std::printf(
      "%s%s: cuda (kept quantized) vs cpu, %d rows, worst top-20 |logprob error| %.3g, "
      "%d decisive rows\n",
      std::string(dtype_name(dtype)).c_str(), mix ? "_m" : "", rows, worst, decisive);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaQuantModelVsCpu,
                         ::testing::Values(std::tuple{DType::kQ8_0, false},
                                           std::tuple{DType::kQ4_K, true},
                                           std::tuple{DType::kQ5_K, true}),
                         [](const auto &info) {
                           return std::string(dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_m" : "");
                         });

}  // namespace
}  // namespace keel::cuda
