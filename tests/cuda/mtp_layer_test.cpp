// The checkpoint's MTP layer on the CUDA runner (exec/cuda/cuda_mtp_layer.h,
// CudaModelRunner::load_mtp) against the CPU runner's (exec/arch/mtp_head.h) on the models
// of tests/fixtures/mtp (support/mtp_fixture_model.h; GLM-4.5's GQA block, DeepSeek-V3's
// MLA block with q through its latent or a plain q_proj, GLM-5's MLA block with its own DSA
// indexer), written in bf16 so that both compute with the same weights, fed the CPU target's
// own final hidden rows of a 41-token prompt: 40 positions in one step (passes of kHeadRows
// head rows), the same positions in split steps after a rolled-back detour, and 3 chained
// drafts (head_checks.h's run_against_cpu). Bounds: the device rounds every GEMM's input to bf16
// and its router may flip a near-tied expert (a few rows then move by tens of percent), so, as
// moe_vs_cpu.h bounds the runner, each row of h' and of the logits is compared as a whole and the
// median and 90th percentile of those errors are bounded; the argmax must agree on all but a tenth
// of the rows whose CPU top two are apart by more than kMargin. Also: the head rows as asked, the
// layer's KV pool (blocks taken, given back, a request past it refused before anything
// changes), and the refusals (no MTP layer; a missing tensor named as in the files).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>

#include "cuda_test_util.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/cuda_mtp_layer.h"
#include "formats/model_weights.h"
#include "head_checks.h"
#include "moe_vs_cpu.h"
#include "support/mtp_fixture_model.h"

namespace keel::cuda {
namespace {

using test::rel_err;

std::filesystem::path scratch(const std::string &tag) {
  return std::filesystem::temp_directory_path() /
         ("keel-cuda-mtp-" + tag + "-" + std::to_string(::getpid()));
}

// Both runners on one fixture's model (bf16), their MTP layers loaded, and the CPU target's
// final hidden rows of a prompt.
struct Layers {
  std::filesystem::path dir;
  ExecContext cpu_ctx{2};
  std::unique_ptr<cpu::CpuModelRunner> cpu;
  CudaContext ctx;
  std::unique_ptr<CudaModelRunner> gpu;
  std::vector<TokenId> tokens;  // the prompt
  std::vector<float> hidden;    // the target's final hidden row of every prompt position
  std::int64_t H = 0, V = 0;
  Layers(const std::string &fixture, std::int32_t kv_blocks = 32) : dir(scratch(fixture)) {
    keel::test::make_mtp_fixture_model(keel::test::mtp_fixture(fixture), dir, DType::kBF16);
    cpu = cpu::CpuModelRunner::open(dir, cpu_ctx, {32, 16});
    gpu = CudaModelRunner::open(dir, ctx, test::head_target_options(kv_blocks));
    cpu->load_mtp();
    gpu->load_mtp();  // reads the files again
    H = cpu->config().hidden_size, V = cpu->config().vocab_size;
    std::mt19937 rng(3);
    std::uniform_int_distribution<TokenId> tok(0, static_cast<TokenId>(V - 1));
    for (int i = 0; i < 41; ++i) tokens.push_back(tok(rng));
    ForwardOutput out;
    cpu->forward(keel::test::hidden_batch(tokens, {}, SequenceSlice::Logits::kNone), out);
    hidden = std::move(out.hidden);
  }
  ~Layers() {
    gpu.reset();
    std::filesystem::remove_all(dir);
  }
  std::size_t positions() const { return tokens.size() - 1; }
  // The CPU and device layers as head_checks.h drives them.
  test::HeadUnderTest host_layer() {
    return {[this](MtpCache &c, const MtpInput &in, MtpOutput &o) { cpu->mtp_forward(c, in, o); },
            [this](std::size_t from, std::size_t n) { return input(from, n); }};
  }
  test::HeadUnderTest device_layer() {
    return {[this](MtpCache &c, const MtpInput &in, MtpOutput &o) { gpu->mtp_forward(c, in, o); },
            [this](std::size_t from, std::size_t n) { return input(from, n); }};
  }
  // The input of positions [from, from + n): h_t and x_{t+1}.
  MtpInput input(std::size_t from, std::size_t n) const {
    MtpInput in;
    in.start_pos = static_cast<std::int32_t>(from);
    in.hidden = std::span<const float>(hidden).subspan(from * H, n * H);
    in.tokens = std::span<const TokenId>(tokens).subspan(from + 1, n);
    in.head = MtpInput::Head::kAll;
    in.want_logits = true;
    return in;
  }
};

constexpr float kMargin = 0.02f;  // make_model's logits are about 0.2 in size

struct Compared {
  std::vector<double> hidden_rows, logit_rows;
  int argmax_checked = 0, argmax_differs = 0;
};

// Rows [0, rows) of `got` against rows [ref_row, ref_row + rows) of `want` (same input).
void compare(const MtpOutput &got, const MtpOutput &want, std::size_t ref_row, std::size_t rows,
             std::int64_t H, std::int64_t V, Compared &c) {
  ASSERT_EQ(got.hidden.size(), rows * H);
  ASSERT_EQ(got.argmax.size(), rows);
  ASSERT_EQ(got.logits.size(), rows * V);
  auto slice = [](const std::vector<float> &v, std::size_t at, std::int64_t n) {
    return std::vector<float>(v.begin() + at * n, v.begin() + (at + 1) * n);
  };
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t w = ref_row + r;
    c.hidden_rows.push_back(rel_err(slice(got.hidden, r, H), slice(want.hidden, w, H)));
    c.logit_rows.push_back(moe_vs_cpu::centered_rel_err(
        got.logits.data() + r * V, want.logits.data() + w * V, static_cast<int>(V)));
    std::vector<float> sorted = slice(want.logits, w, V);
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > kMargin) {
      ++c.argmax_checked;
      if (got.argmax[r] != want.argmax[w]) ++c.argmax_differs;
    }
  }
}

// The median and 90th percentile of `rows` within moe_vs_cpu's bounds; returns them.
std::pair<double, double> expect_rows(std::vector<double> rows, const std::string &what) {
  std::sort(rows.begin(), rows.end());
  const double median = rows[rows.size() / 2], p90 = rows[rows.size() * 9 / 10];
  EXPECT_LT(median, moe_vs_cpu::kRowErrMedian) << what;
  EXPECT_LT(p90, moe_vs_cpu::kRowErrP90) << what;
  return {median, p90};
}

class CudaMtpLayerVsCpu : public ::testing::TestWithParam<const char *> {};

TEST_P(CudaMtpLayerVsCpu, MatchesTheCpuLayer) {
  KEEL_REQUIRE_CUDA_DEVICE();
  Layers l(GetParam());
  const std::size_t n = l.positions();
  ASSERT_GT(n, static_cast<std::size_t>(CudaMtpLayer::kHeadRows));  // several passes
  Compared c;
  test::run_against_cpu(
      l.host_layer(), l.device_layer(), n, l.H,
      [&](const MtpOutput &got, const MtpOutput &want, std::size_t ref_row, std::size_t rows, int) {
        compare(got, want, ref_row, rows, l.H, l.V, c);
      });
  const auto [hm, h90] = expect_rows(c.hidden_rows, "h'");
  const auto [lm, l90] = expect_rows(c.logit_rows, "logits");
  EXPECT_GT(c.argmax_checked, static_cast<int>(n / 4));  // not vacuous
  EXPECT_LE(c.argmax_differs, std::max(1, c.argmax_checked / 10));
  std::printf(
      "[ mtp ] %s: %zu rows; h' error median %.2e, p90 %.2e; logits median %.2e, p90 %.2e; "
      "argmax checked at %d rows (margin > %.2f), %d differ\n",
      GetParam(), c.hidden_rows.size(), hm, h90, lm, l90, c.argmax_checked, kMargin,
      c.argmax_differs);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaMtpLayerVsCpu,
                         ::testing::Values("glm4_moe_tiny.json", "deepseek_v3_tiny.json",
                                           "deepseek_v3_noqlora_tiny.json",
                                           "glm_moe_dsa_tiny.json"),
                         [](const auto &info) {
                           const std::string s = info.param;
                           return s.substr(0, s.find("_tiny"));
                         });

// The head rows as asked (head_checks.h), and the layer's bytes reported.
TEST(CudaMtpLayer, HeadRowsAsAsked) {
  KEEL_REQUIRE_CUDA_DEVICE();
  Layers l("glm4_moe_tiny.json");
  test::expect_head_rows_as_asked(l.device_layer());
  EXPECT_GT(l.gpu->mtp_weights_bytes(), 0);
  EXPECT_GT(l.gpu->mtp_reserved_bytes(), 0);
}

// The layer's KV pool: as many blocks as the target's (4 of 16 positions here), taken and
// given back as head_pool_check.h says.
TEST(CudaMtpLayer, KvPoolTakesAndGivesBackBlocks) {
  KEEL_REQUIRE_CUDA_DEVICE();
  Layers l("deepseek_v3_tiny.json", 4);
  const auto weights = ModelWeights::open(l.dir);
  CudaMtpLayer layer(*l.gpu, *weights);  // a second one, whose pool the test can see
  EXPECT_EQ(layer.pool_blocks(), 4);
  EXPECT_FALSE(layer.borrows_head());  // make_model's layer has a shared_head.head of its own
  test::expect_pool_takes_and_gives_back(
      {[&](MtpCache &c, const MtpInput &in, MtpOutput &o) { layer.forward(c, in, o); },
       [&](std::size_t from, std::size_t n) { return l.input(from, n); }},
      [&] { return layer.free_blocks(); }, layer.pool_bytes());
}

// A model without an MTP layer is refused by name; a missing or mis-shaped tensor of the
// layer's block is named as the files name it (layer 2 of a 2-layer model), not as the
// block's layer 0.
TEST(CudaMtpLayer, Refusals) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = scratch("refusals");
  CudaContext ctx;
  auto expect_refusal = [&](int mtp_layers, const std::string &tensor, bool drop) {
    MakeModelOptions o;
    o.arch = "deepseek_v3";
    o.shape = "tiny";
    o.layers = 2;
    o.mtp_layers = mtp_layers;
    o.dtype = DType::kF32;
    o.out = dir;
    o.threads = 2;
    std::filesystem::remove_all(dir);
    make_model(o);
    keel::test::rewrite_safetensors(
        dir / "model.safetensors", [&](const std::string &name, keel::test::StoredTensor &t) {
          if (name != tensor) return true;
          t.shape = {t.shape[0] / 2, t.shape[1] * 2};  // same bytes, wrong shape
          return !drop;
        });
    const std::string needle = mtp_layers == 0 ? "no MTP layer" : tensor;
    auto gpu = CudaModelRunner::open(dir, ctx, test::head_target_options(8));
    try {
      gpu->load_mtp();
      ADD_FAILURE() << needle << ": no error";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    std::filesystem::remove_all(dir);
  };
  expect_refusal(0, "", true);
  expect_refusal(1, "model.layers.2.hnorm.weight", true);
  expect_refusal(1, "model.layers.2.self_attn.kv_b_proj.weight", true);
  expect_refusal(1, "model.layers.2.self_attn.q_b_proj.weight", false);
}

}  // namespace
}  // namespace keel::cuda
