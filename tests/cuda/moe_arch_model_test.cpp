// GLM-4.5 (glm4_moe) and gpt-oss (gpt_oss) on the CUDA runner, whole tiny models:
// - against transformers' float64 references (tests/fixtures/moe_models, made by
//   scripts/ref/moe_fixtures.py): every prompt logprob and the top logprobs of each greedy
//   step within the CPU-vs-CUDA bound of model_vs_reference_test (bf16 activations), the
//   same greedy token where the reference's margin is decisive, alone and batched with 31
//   other sequences, decode through CUDA graphs. GLM exercises the grouped sigmoid router,
//   its correction bias, routed scaling, the shared expert, the dense first layer and
//   partial rotary; gpt-oss the top-k softmax router with its logit bias, q/k/v and o_proj
//   biases, attention sinks, a sliding window on alternate layers and YaRN.
// - against the CPU runner on make_model's tiny shapes, every path of the experts (the
//   gather-GEMVs, the per-expert GEMMs, both in one run).
// gpt-oss also needs its expert biases and clamped SwiGLU on the device (the routed
// experts' kernels) and its checkpoint and make-model support: until those land these
// cases fail at load with an error naming what is missing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cuda_test_util.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/cuda/cuda_model_runner.h"
#include "formats/make_model.h"
#include "model/model_harness.h"
#include "moe_vs_cpu.h"
#include "support/paths.h"

namespace keel::cuda {
namespace {

using keel::test::BlockHandout;
using keel::test::log_softmax_row;
using keel::test::PagedSeq;
using keel::test::run_step;
using keel::test::StepItem;
using Logits = SequenceSlice::Logits;

// As model_vs_reference_test and moe_test: bf16 activations between kernels against f32
// (CPU) or float64 (transformers).
using moe_vs_cpu::argmax;
using moe_vs_cpu::kLogprobTol;
using moe_vs_cpu::kMargin;
using moe_vs_cpu::pseudo_prompt;
constexpr int kOthers = 31;

CudaRunnerOptions small_options(int moe_gemv_max) {
  CudaRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 512;
  o.max_batch_tokens = 1024;
  o.max_seqs = 32;
  o.max_logits_rows = 128;
  o.max_model_len = 1024;
  o.kernels.moe_gemv_max_tokens = moe_gemv_max;
  o.kernels.moe_lowbit_gemv_max_tokens = moe_gemv_max;  // the case's path for low-bit experts too
  return o;
}

// ---- against transformers ----

class CudaMoeArchVsTransformers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    KEEL_REQUIRE_CUDA_DEVICE();
    dir_ = keel::test::fixtures_dir() / "moe_models" / GetParam();
    if (!std::filesystem::exists(dir_ / "reference.json"))
      GTEST_SKIP() << "fixture absent: " << dir_ << " (scripts/ref/moe_fixtures.py)";
    std::ifstream(dir_ / "reference.json") >> ref_;
  }
  // The fixture sequence's rows against the reference, teacher-forced with its greedy
  // tokens; `step` runs the sequence's next n tokens and returns their log-softmax rows.
  // Every |logprob error| goes to errs_ (checked as a whole by check_errors).
  template <typename Step>
  void compare(const nlohmann::json &p, PagedSeq &seq, Step step) {
    const auto n = static_cast<std::int32_t>(seq.tokens.size());
    const auto rows = step(n, Logits::kAll);
    ASSERT_EQ(rows.size(), static_cast<std::size_t>(n));
    const auto &plp = p["prompt_logprobs"];
    for (std::int32_t i = 1; i < n; ++i)
      errs_.push_back(std::abs(rows[i - 1][seq.tokens[i]] - plp[i].get<double>()));
    std::vector<float> last = rows.back();
    for (const auto &g : p["greedy"]) {
      const TokenId want = g["id"].get<TokenId>();
      if (g["margin"].get<double>() > kMargin) {
        ++greedy_steps_;
        if (argmax(last) != want) {
          ++greedy_misses_;
          if (!routing_flips_) ADD_FAILURE() << "greedy step at pos " << seq.tokens.size();
        }
      }
      for (const auto &t : g["top"])
        errs_.push_back(std::abs(last[t[0].get<int>()] - t[1].get<double>()));
      seq.tokens.push_back(want);
      last = step(1, Logits::kLast).back();
    }
  }
  // A router near-tie that bf16 rounding flips changes a token's experts (hence moe_test's
  // bounds on the median and 90th percentile): at most 2% of the logprobs may pass
  // kLogprobTol, none may pass 1, and the median stays at bf16 rounding.
  //
  // GLM-4.5's grouped routing flips harder: a token's whole expert group (two of its
  // experts at once, weighted by routed_scaling_factor 2.5) changes when bf16 rounding
  // moves a group score across its neighbour's, and these fixtures' large q/k/v biases and
  // norm weights put many tokens near such a tie. Measured on the H200 (session 8, the
  // same kernels match the CPU runner at a row error median of 0.005 on make-model's GLM):
  // medians 0.014-0.024, 15 of 235 logprobs over 0.2, worst 1.4-4.5, 2 greedy steps of
  // ~40 flipped. So for GLM: at most 10% over the bound and of greedy steps flipped, the
  // median at bf16 rounding, and no bound on the worst row.
  void check_errors(const char *what) {
    ASSERT_GT(errs_.size(), 100u) << what;
    std::sort(errs_.begin(), errs_.end());
    const double median = errs_[errs_.size() / 2], worst = errs_.back();
    const long over = errs_.end() - std::upper_bound(errs_.begin(), errs_.end(), kLogprobTol);
    EXPECT_LE(over * (routing_flips_ ? 10 : 50), static_cast<long>(errs_.size()))
        << what << ": " << over << " of " << errs_.size() << " over the bound";
    if (!routing_flips_) {
      EXPECT_LT(worst, 1.0) << what;
    }
    EXPECT_LE(greedy_misses_ * 10, greedy_steps_)
        << what << ": " << greedy_misses_ << " of " << greedy_steps_ << " greedy steps differ";
    EXPECT_LT(median, 0.05) << what;
    std::printf(
        "cuda %s vs transformers, %s: %zu logprobs, |error| median %.3g, p99 %.3g, "
        "worst %.3g\n",
        GetParam().c_str(), what, errs_.size(), median, errs_[errs_.size() * 99 / 100], worst);
    std::printf("cuda %s vs transformers, %s: %ld of %zu over %.2g, %d of %d greedy steps differ\n",
                GetParam().c_str(), what, over, errs_.size(), kLogprobTol, greedy_misses_,
                greedy_steps_);
    errs_.clear();
    greedy_steps_ = greedy_misses_ = 0;
  }
  std::filesystem::path dir_;
  bool routing_flips_ = GetParam().rfind("glm4_moe", 0) == 0;
  int greedy_steps_ = 0, greedy_misses_ = 0;
  nlohmann::json ref_;
  std::vector<double> errs_;
};

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaMoeArchVsTransformers,
                         ::testing::Values("glm4_moe_bf16", "glm4_moe_f32", "glm4_moe_nonorm_f32",
                                           "gpt_oss_bf16", "gpt_oss_f32"),
                         [](const auto &info) { return info.param; });

TEST_P(CudaMoeArchVsTransformers, AloneAndBatchedWith31Others) {
  CudaContext ctx;
  auto runner = CudaModelRunner::open(dir_, ctx, small_options(256));
  ASSERT_TRUE(runner->config().moe);
  const int V = static_cast<int>(runner->config().vocab_size);
  std::uint32_t seed = 7;
  for (const auto &p : ref_["prompts"]) {
    BlockHandout blocks(512, seed++);
    PagedSeq seq;
    seq.tokens = p["ids"].get<std::vector<TokenId>>();
    compare(p, seq, [&](std::int32_t n, Logits l) {
      auto o = run_step(*runner, blocks, {{&seq, n, l}});
      std::vector<std::vector<float>> rows;
      for (std::size_t r = 0; r < o.row_seq.size(); ++r) rows.push_back(log_softmax_row(o, r));
      return rows;
    });
  }
  check_errors("alone");
  for (const auto &p : ref_["prompts"]) {
    BlockHandout blocks(512, seed++);
    std::vector<PagedSeq> others(kOthers);
    for (int s = 0; s < kOthers; ++s)
      others[s].tokens =
          pseudo_prompt(seed * 131u + static_cast<std::uint32_t>(s), 1 + (7 * s) % 40, V);
    PagedSeq seq;
    seq.tokens = p["ids"].get<std::vector<TokenId>>();
    auto pending = [](PagedSeq &q) {
      return StepItem{&q, static_cast<std::int32_t>(q.tokens.size()) - q.computed, Logits::kLast};
    };
    compare(p, seq, [&](std::int32_t n, Logits l) {
      std::vector<StepItem> items;
      for (int s = 0; s < kOthers / 2; ++s) items.push_back(pending(others[s]));
      const std::size_t mine = items.size();
      items.push_back({&seq, n, l});
      for (int s = kOthers / 2; s < kOthers; ++s) items.push_back(pending(others[s]));
      auto o = run_step(*runner, blocks, items);
      std::vector<std::vector<float>> rows;
      for (std::size_t r = 0; r < o.row_seq.size(); ++r) {
        const auto row = log_softmax_row(o, r);
        const auto at = static_cast<std::size_t>(o.row_seq[r]);
        if (at == mine)
          rows.push_back(row);
        else  // the others go on with their own greedy tokens
          items[at].seq->tokens.push_back(argmax(row));
      }
      return rows;
    });
  }
  check_errors("batched with 31 others");
  // Decode steps of one sequence and of 32 replayed graphs.
  EXPECT_GE(runner->graphs_captured(), 2u);
}

// ---- against the CPU runner ----

struct ArchCase {
  const char *arch;
  int gemv_max;  // CudaKernelChoices::moe_gemv_max_tokens (moe_test's meaning)
  const char *name;
  // mxfp4: the routed experts in MXFP4 (make-model's safetensors form, gpt-oss's
  // _blocks / _scales), kept so on the device: the slot GEMVs for steps of <= gemv_max
  // rows, the nonempty experts dequantized + the grouped GEMM above. f8_e4m3: FP8 with
  // 128 x 128 block scales (the whole model but embeddings, norms, routers, lm_head), the
  // experts kept FP8 the same way.
  DType dtype = DType::kBF16;
  bool gguf = false;  // a GGUF file (qwen3_moe's stacked experts; MXFP4 as type 39)
  // GGUF experts' slot GEMVs on the integer-dot GEMV (CudaKernelChoices::moe_gguf_qgemv)
  bool gguf_qgemv = false;
};
class CudaMoeArchVsCpu : public ::testing::TestWithParam<ArchCase> {};
INSTANTIATE_TEST_SUITE_P(
    Models, CudaMoeArchVsCpu,
    ::testing::Values(
        ArchCase{"glm4_moe", 64, "glm4_moe_mixed"}, ArchCase{"glm4_moe", 0, "glm4_moe_gemm_only"},
        ArchCase{"glm4_moe", 1 << 20, "glm4_moe_gemv_only"},
        ArchCase{"gpt_oss", 64, "gpt_oss_mixed"}, ArchCase{"gpt_oss", 0, "gpt_oss_gemm_only"},
        ArchCase{"gpt_oss", 64, "gpt_oss_mxfp4_mixed", DType::kMXFP4},
        ArchCase{"gpt_oss", 0, "gpt_oss_mxfp4_gemm_only", DType::kMXFP4},
        ArchCase{"gpt_oss", 1 << 20, "gpt_oss_mxfp4_gemv_only", DType::kMXFP4},
        ArchCase{"qwen3_moe", 64, "qwen3_moe_mxfp4_mixed", DType::kMXFP4},
        ArchCase{"qwen3_moe", 0, "qwen3_moe_mxfp4_gemm_only", DType::kMXFP4},
        ArchCase{"qwen3_moe", 64, "qwen3_moe_mxfp4_gguf_mixed", DType::kMXFP4, true},
        ArchCase{"qwen3_moe", 64, "qwen3_moe_fp8_mixed", DType::kF8_E4M3},
        ArchCase{"qwen3_moe", 0, "qwen3_moe_fp8_gemm_only", DType::kF8_E4M3},
        ArchCase{"qwen3_moe", 64, "qwen3_moe_q8_0_gguf_mixed", DType::kQ8_0, true},
        ArchCase{"qwen3_moe", 64, "qwen3_moe_q8_0_gguf_qgemv_mixed", DType::kQ8_0, true, true},
        ArchCase{"qwen3_moe", 0, "qwen3_moe_q4_0_gguf_gemm_only", DType::kQ4_0, true}),
    [](const auto &info) { return std::string(info.param.name); });

TEST_P(CudaMoeArchVsCpu, LogprobsAndGreedyAloneAndBatchedWith31) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const ArchCase ac = GetParam();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("keel-cuda-arch-" + std::string(ac.name) + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  MakeModelOptions o;
  o.arch = ac.arch;
  o.shape = "tiny";
  o.dtype = ac.dtype;
  o.seed = 9;
  o.gguf = ac.gguf;
  if (ac.gguf) std::filesystem::create_directories(dir);
  o.out = ac.gguf ? dir / "m.gguf" : dir;
  o.threads = 2;
  make_model(o);
  CudaContext cctx;
  CudaRunnerOptions go = small_options(ac.gemv_max);
  // GGUF blocks stay so on the device only when asked (kAuto keeps what fits as bf16).
  const bool gguf_blocks = ac.dtype == DType::kQ8_0 || ac.dtype == DType::kQ4_0;
  if (gguf_blocks) go.quantized_weights = QuantizedWeights::kOn;
  go.kernels.moe_gguf_qgemv = ac.gguf_qgemv;
  auto gpu = CudaModelRunner::open(o.out, cctx, go);
  ExecContext xctx(2);
  auto cpu = cpu::CpuModelRunner::open(o.out, xctx, {512, 16});
  std::filesystem::remove_all(dir);
  const int V = static_cast<int>(gpu->config().vocab_size);
  // MXFP4 experts stay MXFP4 (the rest of the model is bf16), and the fused decode
  // kernels, which read bf16 experts, are off.
  if (ac.dtype != DType::kBF16) {
    EXPECT_NE(gpu->weight_format().find(ac.dtype == DType::kMXFP4  ? "mxfp4"
                                        : ac.dtype == DType::kQ8_0 ? "q8_0"
                                        : ac.dtype == DType::kQ4_0 ? "q4_0"
                                                                   : "fp8"),
              std::string::npos)
        << gpu->weight_format();
    EXPECT_EQ(gpu->fused_decode_max_m(), 0);
  }

  moe_vs_cpu::RowErrors e;
  moe_vs_cpu::alone_and_batched(*gpu, *cpu, V, 512, e);
  if (HasFatalFailure()) return;
  std::vector<double> &row_errs = e.rows;
  ASSERT_GT(row_errs.size(), 150u);
  std::sort(row_errs.begin(), row_errs.end());
  const double median = row_errs[row_errs.size() / 2], p90 = row_errs[row_errs.size() * 9 / 10];
  EXPECT_LT(median, moe_vs_cpu::kRowErrMedian);
  EXPECT_LT(p90, moe_vs_cpu::kRowErrP90);
  if (ac.gemv_max >= 32) EXPECT_GE(gpu->graphs_captured(), 2u);
  std::printf(
      "cuda %s vs cpu: %zu rows, row error median %.3g, p90 %.3g; worst top-20 "
      "|logprob error| %.3g\n",
      ac.name, row_errs.size(), median, p90, e.worst);
}

// Low-bit experts above the GEMV bound (moe_lowbit_gemv_max_tokens 0: every step) on the
// grouped GEMM that decodes their blocks in shared memory, against the same model on the
// path it replaces (the active experts dequantized to a bf16 scratch, then the bf16
// grouped GEMM). Both multiply the same bf16 weights (MXFP4's A-operand kernel in another
// order of its MMAs' products), so the bound is a bf16 one (1e-3 of a row's spread).
struct LowbitCase {
  const char *arch;
  const char *name;
  DType dtype;
  bool gguf = false;
};
class CudaMoeLowbitGemm : public ::testing::TestWithParam<LowbitCase> {};
INSTANTIATE_TEST_SUITE_P(
    Models, CudaMoeLowbitGemm,
    ::testing::Values(LowbitCase{"gpt_oss", "gpt_oss_mxfp4", DType::kMXFP4},
                      LowbitCase{"qwen3_moe", "qwen3_moe_mxfp4", DType::kMXFP4},
                      LowbitCase{"qwen3_moe", "qwen3_moe_fp8", DType::kF8_E4M3},
                      LowbitCase{"qwen3_moe", "qwen3_moe_q8_0_gguf", DType::kQ8_0, true}),
    [](const auto &info) { return std::string(info.param.name); });

TEST_P(CudaMoeLowbitGemm, MatchesTheDequantizedGemmPath) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const LowbitCase lc = GetParam();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("keel-cuda-lowbit-" + std::string(lc.name) + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  MakeModelOptions o;
  o.arch = lc.arch;
  o.shape = "tiny";
  o.dtype = lc.dtype;
  o.seed = 11;
  o.gguf = lc.gguf;
  if (lc.gguf) std::filesystem::create_directories(dir);
  o.out = lc.gguf ? dir / "m.gguf" : dir;
  o.threads = 2;
  make_model(o);
  CudaContext ctx_new, ctx_old;
  CudaRunnerOptions go = small_options(0);
  if (lc.gguf) go.quantized_weights = QuantizedWeights::kOn;
  auto lowbit = CudaModelRunner::open(o.out, ctx_new, go);
  go.kernels.moe_lowbit_gemm = false;
  auto dequant = CudaModelRunner::open(o.out, ctx_old, go);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(lowbit->moe_lowbit_gemm()) << lowbit->weight_format();
  ASSERT_FALSE(dequant->moe_lowbit_gemm());
  const int V = static_cast<int>(lowbit->config().vocab_size);
  moe_vs_cpu::RowErrors e;
  moe_vs_cpu::alone_and_batched(*lowbit, *dequant, V, 512, e);
  if (HasFatalFailure()) return;
  ASSERT_GT(e.rows.size(), 150u);
  const double worst = *std::max_element(e.rows.begin(), e.rows.end());
  std::printf(
      "cuda %s low-bit GEMM vs dequantize + bf16 GEMM: %zu rows, worst row error %.3g, "
      "worst top-20 |logprob error| %.3g\n",
      lc.name, e.rows.size(), worst, e.worst);
  EXPECT_LT(worst, 1e-3);
}

// What the CUDA runner cannot route it refuses by name, before allocating anything:
// more expert groups than a warp's lanes (the config reader allows them).
TEST(CudaMoeArch, RefusesMoreGroupsThanTheRouterHandles) {
  KEEL_REQUIRE_CUDA_DEVICE();
  MakeModelOptions o;
  o.arch = "glm4_moe";
  o.shape = "tiny";
  ModelConfig c = make_model_config(o);
  c.moe->num_experts = 128;
  c.moe->n_group = 64;
  c.moe->topk_group = 2;
  CudaContext ctx;
  try {
    CudaModelRunner runner(ctx, c, 1, small_options(64));
    ADD_FAILURE() << "opened a router of 64 expert groups";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("n_group 64"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace keel::cuda
