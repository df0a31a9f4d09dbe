// The CUDA runner on real model files: the transformers fixtures (tests/fixtures/models,
// float32 references of the saved weights) and the built-in default model against the
// CPU runner, through the same paged prefill + decode steps.
//
// Tolerance: the CUDA runner keeps activations in bf16 between kernels (the CPU runner
// and the references use float32), so logprobs differ by bf16 rounding carried through
// the layers; kLogprobTol bounds the absolute logprob error, and greedy tokens must agree
// wherever the reference's top-2 margin exceeds kMargin.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "model/model_harness.h"
#include "support/paths.h"

namespace keel::cuda {
namespace {

using keel::test::BlockHandout;
using keel::test::log_softmax_row;
using keel::test::PagedSeq;
using keel::test::run_step;

// Measured on the H200 (2026-12-02, worst over all prompt and top-5 logprobs, which go
// down to -15): llama/mistral fixtures 0.054-0.093, qwen3 0.050-0.083, qwen2 0.108-0.144
// (its q/k/v biases are added after the projection is rounded to bf16: a second rounding);
// default model vs the CPU runner 0.039 over the top 20. Greedy agreed everywhere. A
// wrong mask, rope or weight layout gives errors of order 1.
constexpr double kLogprobTol = 0.2;
constexpr double kMargin = 0.1;

CudaRunnerOptions fixture_options() {
  CudaRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 96;
  o.max_batch_tokens = 512;
  o.max_seqs = 8;
  o.max_logits_rows = 128;
  o.max_model_len = 1024;
  return o;
}

// Opens `dir` on the device, or returns null when the runner does not support its
// architecture yet (qwen2 biases, qwen3 q/k norm).
std::unique_ptr<CudaModelRunner> open_or_null(const std::filesystem::path &dir, CudaContext &ctx) {
  try {
    return CudaModelRunner::open(dir, ctx, fixture_options());
  } catch (const Error &e) {
    if (e.code() == ErrorCode::kUnsupported) return nullptr;
    throw;
  }
}

TokenId argmax(const std::vector<float> &v) {
  return static_cast<TokenId>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  const auto dir = keel::test::fixtures_dir() / "models";
  if (!std::filesystem::exists(dir)) return names;
  for (auto &e : std::filesystem::directory_iterator(dir))
    if (std::filesystem::exists(e.path() / "reference.json"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Each fixture under the device's own features ("auto") and under the smallest set any
// supported GPU has ("baseline": no programmatic launch, 99 KB shared memory per block),
// so one H200 run checks the paths an A100 or an RTX 4090 takes too.
class CudaVsTransformers : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(CudaVsTransformers, PromptLogprobsAndGreedy) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const std::string name = std::get<0>(GetParam());
  const auto dir = keel::test::fixtures_dir() / "models" / name;
  nlohmann::json ref;
  std::ifstream(dir / "reference.json") >> ref;
  CudaContextOptions co;
  co.features = std::get<1>(GetParam());
  CudaContext ctx(co);
  ASSERT_EQ(ctx.features().baseline, co.features == "baseline");
  auto runner = open_or_null(dir, ctx);
  if (!runner) GTEST_SKIP() << name << ": architecture not supported by the CUDA runner yet";
  double worst = 0;
  std::uint32_t seed = 7;
  for (const auto &p : ref["prompts"]) {
    BlockHandout blocks(96, seed++);
    PagedSeq seq;
    seq.tokens = p["ids"].get<std::vector<TokenId>>();
    const auto n = static_cast<std::int32_t>(seq.tokens.size());
    auto out = run_step(*runner, blocks, {{&seq, n, SequenceSlice::Logits::kAll}});
    ASSERT_EQ(out.row_seq.size(), static_cast<std::size_t>(n));
    const auto &plp = p["prompt_logprobs"];
    for (std::int32_t i = 1; i < n; ++i) {
      const double err =
          std::abs(log_softmax_row(out, i - 1)[seq.tokens[i]] - plp[i].get<double>());
      worst = std::max(worst, err);
      EXPECT_LT(err, kLogprobTol) << "prompt token " << i;
    }
    std::vector<float> last = log_softmax_row(out, n - 1);
    for (const auto &step : p["greedy"]) {
      const TokenId want = step["id"].get<TokenId>();
      if (step["margin"].get<double>() > kMargin) {
        EXPECT_EQ(argmax(last), want) << "greedy at " << seq.tokens.size();
      }
      for (const auto &t : step["top"]) {
        const double err = std::abs(last[t[0].get<int>()] - t[1].get<double>());
        worst = std::max(worst, err);
        EXPECT_LT(err, kLogprobTol) << "top logprob of " << t[0] << " at pos " << seq.tokens.size();
      }
      seq.tokens.push_back(want);  // teacher-forced
      last =
          log_softmax_row(run_step(*runner, blocks, {{&seq, 1, SequenceSlice::Logits::kLast}}), 0);
    }
  }
  std::printf("cuda %s (%s): max |logprob error| = %.3g\n", name.c_str(),
              ctx.features().describe().c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaVsTransformers,
                         ::testing::Combine(::testing::ValuesIn(fixture_names()),
                                            ::testing::Values("auto", "baseline")),
                         [](const auto &info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

// The default model (trained, so logits are peaked, unlike random fixtures): CPU and CUDA
// runners through the same ragged steps — two sequences prefilled in chunks while a third
// decodes — compared row by row.
// Under the device's features and the forced baseline, as above.
class CudaVsCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaVsCpu, DefaultModelRaggedSteps) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = keel::test::source_dir() / "models" / "default";
  if (!std::filesystem::exists(dir / "model.safetensors"))
    GTEST_SKIP() << "no default model at " << dir;
  CudaContextOptions co;
  co.features = GetParam();
  CudaContext cctx(co);
  auto gpu = CudaModelRunner::open(dir, cctx, fixture_options());
  ExecContext xctx(4);
  auto cpu = cpu::CpuModelRunner::open(dir, xctx, {96, 16});
  const int V = static_cast<int>(gpu->config().vocab_size);
  std::mt19937 rng(11);
  std::uniform_int_distribution<TokenId> tok(3, V - 1);
  std::vector<PagedSeq> g(3), c(3);
  const int lens[3] = {70, 33, 9};
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < lens[s]; ++i) g[s].tokens.push_back(tok(rng));
    c[s].tokens = g[s].tokens;
  }
  BlockHandout gb(96, 3), cb(96, 5);
  double worst = 0;
  int compared = 0, agreed = 0, decisive = 0;
  auto compare = [&](const ForwardOutput &go, const ForwardOutput &co) {
    ASSERT_EQ(go.row_seq, co.row_seq);
    ASSERT_EQ(go.row_pos, co.row_pos);
    for (std::size_t r = 0; r < go.row_seq.size(); ++r) {
      const auto lg = log_softmax_row(go, r), lc = log_softmax_row(co, r);
      const TokenId top = argmax(lc);
      std::vector<float> sorted = lc;
      std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<>());
      // Error over the tokens that matter: the CPU's top 20.
      std::vector<int> idx(V);
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + 20, idx.end(),
                        [&](int a, int b) { return lc[a] > lc[b]; });
      for (int k = 0; k < 20; ++k) {
        const double err = std::abs(lg[idx[k]] - lc[idx[k]]);
        worst = std::max(worst, err);
        EXPECT_LT(err, kLogprobTol) << "row " << r << " token " << idx[k];
      }
      ++compared;
      if (sorted[0] - sorted[1] > kMargin) {
        ++decisive;
        agreed += argmax(lg) == top;
        EXPECT_EQ(argmax(lg), top) << "row " << r;
      }
    }
  };
  using L = SequenceSlice::Logits;
  // Seq 2 decodes the CPU's greedy tokens (teacher forcing keeps both on one path).
  auto feed_greedy = [&](const ForwardOutput &co, const std::vector<keel::test::StepItem> &ci) {
    int last = -1;
    for (std::size_t r = 0; r < co.row_seq.size(); ++r)
      if (ci[co.row_seq[r]].seq == &c[2]) last = static_cast<int>(r);
    if (last < 0) return;
    const TokenId t = argmax(log_softmax_row(co, last));
    c[2].tokens.push_back(t);
    g[2].tokens.push_back(t);
  };
  for (int step = 0; step < 12; ++step) {
    std::vector<keel::test::StepItem> gi, ci;
    if (step == 0) {  // seq 2 prefills whole (all logits)
      gi.push_back({&g[2], 9, L::kAll});
      ci.push_back({&c[2], 9, L::kAll});
    } else {  // then decodes
      gi.push_back({&g[2], 1, L::kLast});
      ci.push_back({&c[2], 1, L::kLast});
    }
    const int left0 = lens[0] - g[0].computed;  // seq 0 prefills in chunks of 13
    if (left0 > 0) {
      const int n = std::min(left0, 13);
      gi.push_back({&g[0], n, n == left0 ? L::kLast : L::kNone});
      ci.push_back({&c[0], n, n == left0 ? L::kLast : L::kNone});
    }
    if (step == 2) {  // seq 1 joins with its whole prompt
      gi.push_back({&g[1], 33, L::kLast});
      ci.push_back({&c[1], 33, L::kLast});
    }
    const auto go = run_step(*gpu, gb, gi);
    const auto co = run_step(*cpu, cb, ci);
    compare(go, co);
    feed_greedy(co, ci);
  }
  EXPECT_GT(compared, 10);
  std::printf(
      "cuda vs cpu (default model): %d rows, worst top-20 |logprob error| %.3g, greedy %d/%d "
      "decisive rows agree\n",
      compared, worst, agreed, decisive);
}

INSTANTIATE_TEST_SUITE_P(Features, CudaVsCpu, ::testing::Values("auto", "baseline"));

}  // namespace
}  // namespace keel::cuda
