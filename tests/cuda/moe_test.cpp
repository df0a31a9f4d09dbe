// Mixture-of-experts on CUDA (k_moe.h, cuda_runner_moe.cpp) against the CPU: the routing
// kernel against exec/arch/moe_ffn.h's route_token on logits full of ties, the grouping
// kernel against a counting sort done here, the expert gather-GEMVs against a float64
// reference, and whole tiny qwen3_moe / mixtral models (make_model, as the CPU MoE tests
// make them) against the CPU runner: prompt logprobs within the CPU-vs-CUDA bound of
// model_vs_reference_test, the same greedy tokens, alone and batched with 31 other
// sequences, decode through CUDA graphs, on the GEMV path, the GEMM path and both.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include "cuda_test_util.h"
#include "exec/arch/moe_ffn.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/cuda/k_decode_fused.h"
#include "exec/cuda/k_moe.h"
#include "exec/cuda/k_moe_decode.h"
#include "formats/make_model.h"
#include "model/model_harness.h"
#include "moe_vs_cpu.h"

namespace keel::cuda {
namespace {

using test::download;
using test::upload;

// Logits drawn from a handful of values, so most rows have ties inside their top k.
std::vector<float> tied_logits(int T, int E, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, 5);
  std::vector<float> v(static_cast<std::size_t>(T) * E);
  for (float &x : v) x = 0.75f * static_cast<float>(d(rng));
  return v;
}

struct RouteCase {
  int E, k;
  bool norm;
};
class MoeRoute : public ::testing::TestWithParam<RouteCase> {};
INSTANTIATE_TEST_SUITE_P(Shapes, MoeRoute,
                         ::testing::Values(RouteCase{8, 2, true}, RouteCase{8, 2, false},
                                           RouteCase{128, 8, true}, RouteCase{60, 4, false},
                                           RouteCase{256, 8, true}));

TEST_P(MoeRoute, MatchesCpuTopKOnTies) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto [E, k, norm] = GetParam();
  const int T = 300;
  CudaContext ctx;
  const auto logits = tied_logits(T, E, 17 + E);
  const DeviceBuffer d_logits = upload(ctx, logits);
  DeviceBuffer d_ids(T * k * 4), d_w(T * k * 4);
  launch_moe_route(ctx.compute(), d_logits.as<float>(), T, E, k, norm, d_ids.as<std::int32_t>(),
                   d_w.as<float>());
  const auto ids = download<std::int32_t>(ctx, d_ids, T * k);
  const auto w = download<float>(ctx, d_w, T * k);
  int tied_rows = 0;
  for (int t = 0; t < T; ++t) {
    std::vector<std::int32_t> want(k);
    std::vector<float> ww(k);
    arch::route_token(logits.data() + t * E, E, k, norm, want.data(), ww.data());
    tied_rows += logits[t * E + want[k - 1]] == logits[t * E + want[0]];
    for (int j = 0; j < k; ++j) {
      ASSERT_EQ(ids[t * k + j], want[j]) << "token " << t << " choice " << j;
      EXPECT_NEAR(w[t * k + j], ww[j], 1e-5f + 1e-5f * ww[j]) << "token " << t;
    }
  }
  EXPECT_GT(tied_rows, 10);  // the ties really were exercised
}

// The grouping launch_moe_group promises, computed on the host.
std::vector<std::int32_t> group_reference(const std::vector<std::int32_t> &ids, int E, int k,
                                          int align, const MoeGroupLayout &L) {
  std::vector<std::int32_t> out(L.ints(), 0);
  std::vector<int> cnt(E, 0);
  for (int e : ids) ++cnt[e];
  int at = 0, na = 0;
  std::vector<int> next(E);
  for (int e = 0; e < E; ++e) {
    out[L.starts() + e] = next[e] = at;
    out[L.counts() + e] = cnt[e];
    if (cnt[e]) out[L.active() + na++] = e;
    at += (cnt[e] + align - 1) / align * align;
  }
  out[L.starts() + E] = at;
  out[L.n_active()] = na;
  std::fill(out.begin() + L.row_token(), out.begin() + L.row_token() + L.rows_cap, -1);
  for (std::size_t s = 0; s < ids.size(); ++s) {
    const int row = next[ids[s]]++;
    out[L.slot_row() + s] = row;
    out[L.row_token() + row] = static_cast<int>(s) / k;
  }
  return out;
}

TEST(MoeGroup, StableCountingSortByExpert) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  for (const auto [S, E, k, align] : {std::array{5000, 128, 8, 1}, std::array{5000, 128, 8, 32},
                                      std::array{2, 8, 2, 1}, std::array{3000, 8, 2, 32}}) {
    std::mt19937 rng(S + E + align);
    // Skewed: half the slots go to the first few experts, so groups span several tiles.
    std::uniform_int_distribution<int> any(0, E - 1), few(0, std::min(E, 3) - 1);
    std::vector<std::int32_t> ids(S);
    for (auto &e : ids) e = (rng() & 1) ? few(rng) : any(rng);
    const MoeGroupLayout L{E, S, moe_rows_cap(S, E, align)};
    const DeviceBuffer d_ids = upload(ctx, ids);
    DeviceBuffer d_out(L.ints() * 4);
    test::poison(ctx, d_out);
    launch_moe_group(ctx.compute(), d_ids.as<std::int32_t>(), S, E, k, align, L.rows_cap,
                     d_out.as<std::int32_t>());
    const auto got = download<std::int32_t>(ctx, d_out, L.ints());
    const auto want = group_reference(ids, E, k, align, L);
    const int na = want[L.n_active()];
    ASSERT_EQ(got[L.n_active()], na);
    for (std::int64_t i = 0; i < L.ints(); ++i) {
      if (i >= L.active() + na && i < L.n_active()) continue;  // unused active entries
      ASSERT_EQ(got[i], want[i]) << "S " << S << " align " << align << " entry " << i;
    }
  }
}

// The experts' gather-GEMVs and the combine on one layer against float64, on the rows
// launch_moe_route and launch_moe_group give: few tokens per expert (T 11, E 16, k 4), and
// more than the 8 a warp keeps at once (T 40, E 4, k 2: about 20 per expert).
struct ExpertCase {
  int T, E, k;
};
class MoeExperts : public ::testing::TestWithParam<ExpertCase> {};
INSTANTIATE_TEST_SUITE_P(Shapes, MoeExperts,
                         ::testing::Values(ExpertCase{11, 16, 4}, ExpertCase{40, 4, 2}));

TEST_P(MoeExperts, GemvAndCombineMatchFloat64) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto [T, E, k] = GetParam();
  const int H = 128, Ie = 64, S = T * k;
  CudaContext ctx;
  std::mt19937 rng(3);
  const auto x = test::random_bf16_values(T * H, rng);
  const auto gu = test::random_bf16_values(std::size_t(E) * 2 * Ie * H, rng, -0.15f, 0.15f);
  const auto dn = test::random_bf16_values(std::size_t(E) * H * Ie, rng, -0.2f, 0.2f);
  std::vector<float> logits(T * E);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (float &v : logits) v = nd(rng);
  const DeviceBuffer d_x = upload(ctx, test::to_bf16(x)), d_gu = upload(ctx, test::to_bf16(gu)),
                     d_dn = upload(ctx, test::to_bf16(dn)), d_logits = upload(ctx, logits);
  const MoeGroupLayout L{E, S, moe_rows_cap(S, E, 1)};
  DeviceBuffer d_ids(S * 4), d_w(S * 4), d_group(L.ints() * 4), d_act(L.rows_cap * Ie * 2),
      d_out(L.rows_cap * H * 2), d_y(T * H * 2);
  const StreamRef s = ctx.compute();
  launch_moe_route(s, d_logits.as<float>(), T, E, k, true, d_ids.as<std::int32_t>(),
                   d_w.as<float>());
  launch_moe_group(s, d_ids.as<std::int32_t>(), S, E, k, 1, L.rows_cap, d_group.as<std::int32_t>());
  launch_moe_gate_up_gemv(s, d_x.as<bf16>(), d_gu.as<bf16>(), H, Ie, d_group.as<std::int32_t>(), L,
                          std::min(E, S), d_act.as<bf16>());
  launch_moe_down_gemv(s, d_act.as<bf16>(), d_dn.as<bf16>(), H, Ie, d_group.as<std::int32_t>(), L,
                       std::min(E, S), d_out.as<bf16>());
  launch_moe_combine(s, d_out.as<bf16>(), d_ids.as<std::int32_t>(), d_w.as<float>(), T, k, H,
                     d_group.as<std::int32_t>(), L, d_y.as<bf16>());
  const auto y = test::from_bf16(download<std::uint16_t>(ctx, d_y, T * H));
  std::vector<float> ref(T * H, 0.0f);
  for (int t = 0; t < T; ++t) {
    std::vector<std::int32_t> ids(k);
    std::vector<float> w(k);
    arch::route_token(logits.data() + t * E, E, k, true, ids.data(), w.data());
    for (int j = 0; j < k; ++j) {
      const std::size_t e = ids[j];
      std::vector<double> act(Ie);
      for (int i = 0; i < Ie; ++i) {
        double g = 0, u = 0;
        for (int c = 0; c < H; ++c) {
          g += double(gu[(e * 2 * Ie + i) * H + c]) * x[t * H + c];
          u += double(gu[(e * 2 * Ie + Ie + i) * H + c]) * x[t * H + c];
        }
        act[i] = g / (1 + std::exp(-g)) * u;
      }
      for (int c = 0; c < H; ++c) {
        double o = 0;
        for (int i = 0; i < Ie; ++i) o += double(dn[(e * H + c) * Ie + i]) * act[i];
        ref[t * H + c] += static_cast<float>(w[j] * o);
      }
    }
  }
  EXPECT_LT(test::rel_err(y, ref), 1e-2);
}

// ---- whole models against the CPU runner ----

using moe_vs_cpu::kRowErrMedian;
using moe_vs_cpu::kRowErrP90;

struct ModelCase {
  const char *arch;
  // CudaKernelChoices::moe_gemv_max_tokens. 64, "mixed": the 29-token prefill and every
  // decode step on the GEMVs, the 404-token batched prefill on the GEMMs; 0: all on the
  // GEMMs (no graphs); 1 << 20: all on the GEMVs.
  int gemv_max;
  const char *name;
};
class CudaMoeVsCpu : public ::testing::TestWithParam<ModelCase> {};
INSTANTIATE_TEST_SUITE_P(Models, CudaMoeVsCpu,
                         ::testing::Values(ModelCase{"qwen3_moe", 64, "qwen3_moe_mixed"},
                                           ModelCase{"qwen3_moe", 0, "qwen3_moe_gemm_only"},
                                           ModelCase{"qwen3_moe", 1 << 20, "qwen3_moe_gemv_only"},
                                           ModelCase{"mixtral", 64, "mixtral_mixed"},
                                           ModelCase{"mixtral", 0, "mixtral_gemm_only"}),
                         [](const auto &info) { return std::string(info.param.name); });

TEST_P(CudaMoeVsCpu, PromptLogprobsAndGreedyAloneAndBatchedWith31) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const ModelCase mc = GetParam();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("keel-cuda-moe-" + std::string(mc.name) + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  MakeModelOptions o;
  o.arch = mc.arch;
  o.shape = "tiny";
  o.dtype = DType::kBF16;
  o.seed = 5;
  o.out = dir;
  o.threads = 2;
  make_model(o);
  CudaContext cctx;
  CudaRunnerOptions opts;
  opts.block_size = 16;
  opts.num_kv_blocks = 256;
  opts.max_batch_tokens = 1024;
  opts.max_seqs = 32;
  opts.max_logits_rows = 64;
  opts.max_model_len = 1024;
  opts.kernels.moe_gemv_max_tokens = mc.gemv_max;
  auto gpu = CudaModelRunner::open(dir, cctx, opts);
  ExecContext xctx(2);
  auto cpu = cpu::CpuModelRunner::open(dir, xctx, {256, 16});
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(gpu->config().moe);
  const int V = static_cast<int>(gpu->config().vocab_size);
  // Softmax routing, no router bias, no shared expert, bf16 experts: decode steps up to the
  // MoE decode kernels' rows take the fused path (a larger fused GEMV limit must not turn
  // it off for every step).
  EXPECT_EQ(gpu->fused_decode_max_m(), std::min(kMoeDecodeMaxT, kFusedGemvMaxM));

  moe_vs_cpu::RowErrors e;
  moe_vs_cpu::alone_and_batched(*gpu, *cpu, V, 256, e);
  if (HasFatalFailure()) return;
  std::vector<double> &row_errs = e.rows;
  ASSERT_GT(row_errs.size(), 150u);
  std::sort(row_errs.begin(), row_errs.end());
  const double median = row_errs[row_errs.size() / 2], p90 = row_errs[row_errs.size() * 9 / 10];
  EXPECT_LT(median, kRowErrMedian);
  EXPECT_LT(p90, kRowErrP90);
  // Decode of 1 and of 32 sequences replayed graphs: on the GEMV path, and (gemv_max 0) on
  // the grouped GEMM, whose launch shapes come from device memory (moe_grouped_gemm, the
  // default; only the per-expert cuBLASLt path runs eagerly).
  EXPECT_GE(gpu->graphs_captured(), 2u);
  std::printf(
      "cuda moe %s: %zu rows vs cpu: row error median %.3g, p90 %.3g, worst %.3g; worst top-20 "
      "|logprob error| %.3g; %d decisive rows\n",
      mc.name, row_errs.size(), median, p90, row_errs.back(), e.worst, e.decisive);
}

}  // namespace
}  // namespace keel::cuda
