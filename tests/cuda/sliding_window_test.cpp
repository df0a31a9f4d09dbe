// Sliding-window attention through the whole model: a tiny random Mistral-like model
// (sliding_window much smaller than the prompts) on the CUDA runner against the CPU
// runner, through the same ragged steps (a prompt prefilled in chunks, one prefilled
// whole, one decoding all along, then decode steps for all), within bf16 tolerance.
// Two shapes: head_dim 32 (general attention kernel throughout) and head_dim 64 with a
// GQA group of 4 (flash kernel for the prefill chunks, decode kernel for decode steps,
// decode steps replayed from CUDA graphs).
//
// The same schedule on a CPU runner without the window must differ by far more than the
// tolerance (the test can tell a window from none); that part runs without a GPU too.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include "core/half.h"
#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "model/model_harness.h"

namespace keel::cuda {
namespace {

using keel::test::BlockHandout;
using keel::test::log_softmax_row;
using keel::test::PagedSeq;
using keel::test::run_step;
using keel::test::StepItem;

// As model_vs_reference_test.cpp: bf16 activations on the GPU vs float32 on the CPU.
constexpr double kLogprobTol = 0.2;
constexpr double kMargin = 0.1;
constexpr int kBlockSize = 4;
constexpr int kNumBlocks = 96;

// Random bf16 weights with HF names for a Llama-family config (all tensors bf16).
struct RandomModel {
  ModelConfig cfg;
  std::map<std::string, std::pair<std::vector<std::int64_t>, std::vector<std::uint16_t>>> w;

  RandomModel(ModelConfig c, std::uint32_t seed) : cfg(std::move(c)) {
    std::mt19937 rng(seed);
    const auto H = cfg.hidden_size, I = cfg.intermediate_size, hd = cfg.head_dim;
    const auto qd = cfg.num_heads * hd, kvd = cfg.num_kv_heads * hd;
    auto add = [&](const std::string &n, std::vector<std::int64_t> shape, float lo, float hi) {
      std::uniform_real_distribution<float> d(lo, hi);
      std::int64_t count = 1;
      for (auto e : shape) count *= e;
      std::vector<std::uint16_t> v(static_cast<std::size_t>(count));
      for (auto &x : v) x = f32_to_bf16(d(rng));
      w[n] = {std::move(shape), std::move(v)};
    };
    auto lin = [&](const std::string &n, std::int64_t out, std::int64_t in) {
      const float a = std::sqrt(3.0f / static_cast<float>(in));
      add(n, {out, in}, -a, a);
    };
    add("model.embed_tokens.weight", {cfg.vocab_size, H}, -1.0f, 1.0f);
    lin("lm_head.weight", cfg.vocab_size, H);
    add("model.norm.weight", {H}, 0.7f, 1.3f);
    for (int l = 0; l < cfg.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {H}, 0.7f, 1.3f);
      add(p + "post_attention_layernorm.weight", {H}, 0.7f, 1.3f);
      lin(p + "self_attn.q_proj.weight", qd, H);
      lin(p + "self_attn.k_proj.weight", kvd, H);
      lin(p + "self_attn.v_proj.weight", kvd, H);
      lin(p + "self_attn.o_proj.weight", H, qd);
      lin(p + "mlp.gate_proj.weight", I, H);
      lin(p + "mlp.up_proj.weight", I, H);
      lin(p + "mlp.down_proj.weight", H, I);
      if (cfg.attention_bias) {
        add(p + "self_attn.q_proj.bias", {qd}, -0.5f, 0.5f);
        add(p + "self_attn.k_proj.bias", {kvd}, -0.5f, 0.5f);
        add(p + "self_attn.v_proj.bias", {kvd}, -0.5f, 0.5f);
      }
      if (cfg.attention_out_bias) add(p + "self_attn.o_proj.bias", {H}, -0.5f, 0.5f);
      // Sinks from below to well above the rows' scores.
      if (cfg.attention_sinks) add(p + "self_attn.sinks", {cfg.num_heads}, -1.0f, 4.0f);
    }
  }

  std::optional<TensorView> find(const std::string &name) const {
    auto it = w.find(name);
    if (it == w.end()) return std::nullopt;
    TensorView v;
    v.name = name;
    v.dtype = DType::kBF16;
    v.shape = it->second.first;
    v.data = reinterpret_cast<const std::byte *>(it->second.second.data());
    v.nbytes = it->second.second.size() * 2;
    return v;
  }
};

ModelConfig mistral_like(std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                         std::int64_t window) {
  ModelConfig c;
  c.arch = Arch::kMistral;
  c.arch_name = "mistral";
  c.vocab_size = 384;
  c.hidden_size = 128;
  c.intermediate_size = 256;
  c.num_layers = 2;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 512;
  c.sliding_window = window;
  return c;
}

// gpt-oss's attention on a dense model: the window on every other layer (from the first),
// a sink per q head, q/k/v and o_proj biases; and GLM's partial rotary (half of each head).
ModelConfig gpt_oss_attention(std::int64_t heads, std::int64_t kv_heads, std::int64_t head_dim,
                              std::int64_t window) {
  ModelConfig c = mistral_like(heads, kv_heads, head_dim, window);
  c.sliding_layers = {true, false};
  c.attention_sinks = true;
  c.attention_bias = true;
  c.attention_out_bias = true;
  c.partial_rotary_factor = 0.5;
  return c;
}

std::unique_ptr<cpu::CpuModelRunner> cpu_runner(const RandomModel &m, const ModelConfig &cfg,
                                                ExecContext &x) {
  return std::make_unique<cpu::CpuModelRunner>(
      cfg, [&](const std::string &n) { return m.find(n); }, nullptr, x,
      cpu::KvOptions{kNumBlocks, kBlockSize});
}

TokenId argmax(const std::vector<float> &v) {
  return static_cast<TokenId>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Worst |logprob difference| over the top 20 tokens of `ref`.
double top20_err(const std::vector<float> &got, const std::vector<float> &ref) {
  std::vector<int> idx(ref.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + 20, idx.end(),
                    [&](int a, int b) { return ref[a] > ref[b]; });
  double worst = 0;
  for (int k = 0; k < 20; ++k) worst = std::max(worst, double(std::abs(got[idx[k]] - ref[idx[k]])));
  return worst;
}

struct Comparison {
  double worst = 0;       // runner vs the first (reference) runner, every row
  double worst_late = 0;  // the same over rows at positions >= window only
  int rows = 0, decisive = 0, agreed = 0;
};

// Runs one ragged schedule on every runner (runners[0] is the reference: its greedy
// tokens feed every runner's decoding sequences) and compares each runner's logits rows
// with the reference's. Prompts: 50 tokens in chunks of 13, 24 whole from step 1, and a
// 3-token prompt decoding from step 1 on; then 10 decode steps for all three.
std::vector<Comparison> run_schedule(const std::vector<ModelRunner *> &runners, int window,
                                     std::uint32_t seed) {
  const std::size_t N = runners.size();
  const int V = static_cast<int>(runners[0]->config().vocab_size);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<TokenId> tok(3, V - 1);
  const int lens[3] = {50, 24, 3};
  std::vector<std::vector<PagedSeq>> seqs(N, std::vector<PagedSeq>(3));
  for (int s = 0; s < 3; ++s) {
    std::vector<TokenId> t(lens[s]);
    for (auto &x : t) x = tok(rng);
    for (auto &r : seqs) r[s].tokens = t;
  }
  std::vector<BlockHandout> handouts;
  for (std::size_t r = 0; r < N; ++r) handouts.emplace_back(kNumBlocks, seed + 11 * r);
  std::vector<Comparison> cmp(N);
  using L = SequenceSlice::Logits;
  for (int step = 0; step < 16; ++step) {
    // (sequence, tokens) of this step, the same for every runner.
    std::vector<std::pair<int, int>> plan;
    std::vector<L> logits;
    const PagedSeq &s0 = seqs[0][0];
    if (s0.computed < lens[0]) {
      plan.push_back({0, std::min(13, lens[0] - s0.computed)});
      logits.push_back(L::kAll);
    } else {
      plan.push_back({0, 1});
      logits.push_back(L::kLast);
    }
    if (step >= 1) {
      plan.push_back({1, seqs[0][1].computed == 0 ? lens[1] : 1});
      logits.push_back(L::kLast);
    }
    plan.push_back({2, seqs[0][2].computed == 0 ? lens[2] : 1});
    logits.push_back(seqs[0][2].computed == 0 ? L::kAll : L::kLast);

    std::vector<ForwardOutput> outs;
    for (std::size_t r = 0; r < N; ++r) {
      std::vector<StepItem> items;
      for (std::size_t i = 0; i < plan.size(); ++i)
        items.push_back({&seqs[r][plan[i].first], plan[i].second, logits[i]});
      outs.push_back(run_step(*runners[r], handouts[r], items));
    }
    const ForwardOutput &ref = outs[0];
    for (std::size_t r = 1; r < N; ++r) {
      EXPECT_EQ(outs[r].row_seq, ref.row_seq);
      EXPECT_EQ(outs[r].row_pos, ref.row_pos);
      if (outs[r].row_seq != ref.row_seq) continue;
      for (std::size_t row = 0; row < ref.row_seq.size(); ++row) {
        const auto lr = log_softmax_row(ref, row), lg = log_softmax_row(outs[r], row);
        const double err = top20_err(lg, lr);
        cmp[r].worst = std::max(cmp[r].worst, err);
        if (ref.row_pos[row] >= window) cmp[r].worst_late = std::max(cmp[r].worst_late, err);
        ++cmp[r].rows;
        std::vector<float> sorted = lr;
        std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<>());
        if (sorted[0] - sorted[1] > kMargin) {
          ++cmp[r].decisive;
          cmp[r].agreed += argmax(lg) == argmax(lr);
        }
      }
    }
    // Teacher forcing: every sequence that produced a last row continues with the
    // reference's greedy token (the last row of each sequence in this step).
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const int s = plan[i].first;
      if (seqs[0][s].computed < lens[s]) continue;  // still prefilling
      int last = -1;
      for (std::size_t row = 0; row < ref.row_seq.size(); ++row)
        if (ref.row_seq[row] == static_cast<std::int32_t>(i)) last = static_cast<int>(row);
      if (last < 0) continue;
      const TokenId t = argmax(log_softmax_row(ref, last));
      for (auto &rs : seqs) rs[s].tokens.push_back(t);
    }
  }
  return cmp;
}

// The schedule can tell a window from none: without it the CPU runner's rows past the
// window move by far more than the GPU tolerance (and not at all before it).
TEST(SlidingWindowModel, WindowChangesCpuLogits) {
  for (auto [heads, kv_heads, hd, window] :
       {std::array<std::int64_t, 4>{4, 2, 32, 8}, {8, 2, 64, 12}}) {
    RandomModel m(mistral_like(heads, kv_heads, hd, window), 1000 + static_cast<int>(hd));
    ExecContext x(2);
    auto win = cpu_runner(m, m.cfg, x);
    ModelConfig none = m.cfg;
    none.sliding_window.reset();
    auto full = cpu_runner(m, none, x);
    const auto cmp = run_schedule({win.get(), full.get()}, static_cast<int>(window), 5);
    std::printf("hd %d window %d: cpu without window vs with, worst top-20 |logprob diff| %.3g\n",
                static_cast<int>(hd), static_cast<int>(window), cmp[1].worst_late);
    EXPECT_GT(cmp[1].worst_late, 5 * kLogprobTol);
  }
}

// The gpt-oss attention pieces each move the CPU runner's logits by far more than the
// GPU tolerance, so the comparison below can tell them apart from their absence.
TEST(SlidingWindowModel, GptOssAttentionPiecesChangeCpuLogits) {
  const std::int64_t window = 8;
  RandomModel m(gpt_oss_attention(4, 2, 32, window), 77);
  ExecContext x(2);
  auto with = cpu_runner(m, m.cfg, x);
  ModelConfig all_windowed = m.cfg, no_sinks = m.cfg, full_rotary = m.cfg;
  all_windowed.sliding_layers.clear();  // the window on both layers
  no_sinks.attention_sinks = false;
  full_rotary.partial_rotary_factor = 1.0;
  RandomModel sinkless = m;  // the CPU applies sinks wherever their tensor is
  for (int l = 0; l < m.cfg.num_layers; ++l)
    sinkless.w.erase("model.layers." + std::to_string(l) + ".self_attn.sinks");
  auto a = cpu_runner(m, all_windowed, x);
  auto b = cpu_runner(sinkless, no_sinks, x);
  auto c = cpu_runner(m, full_rotary, x);
  const auto cmp = run_schedule({with.get(), a.get(), b.get(), c.get()}, window, 5);
  std::printf(
      "cpu gpt-oss attention: alternating vs every layer windowed %.3g, sinks vs none "
      "%.3g, partial vs full rotary %.3g (worst top-20 |logprob diff|)\n",
      cmp[1].worst_late, cmp[2].worst, cmp[3].worst);
  EXPECT_GT(cmp[1].worst_late, 5 * kLogprobTol);
  EXPECT_GT(cmp[2].worst, 5 * kLogprobTol);
  EXPECT_GT(cmp[3].worst, 5 * kLogprobTol);
}

void check_gpu_vs_cpu(std::int64_t heads, std::int64_t kv_heads, std::int64_t hd,
                      std::int64_t window, bool graphs, const std::string &features = "auto",
                      bool gpt_oss = false) {
  RandomModel m(gpt_oss ? gpt_oss_attention(heads, kv_heads, hd, window)
                        : mistral_like(heads, kv_heads, hd, window),
                1000 + static_cast<int>(hd));
  ExecContext x(4);
  auto cpu = cpu_runner(m, m.cfg, x);
  CudaContextOptions co;
  co.features = features;
  CudaContext ctx(co);
  CudaRunnerOptions o;
  o.block_size = kBlockSize;
  o.num_kv_blocks = kNumBlocks;
  o.max_batch_tokens = 128;
  o.max_seqs = 8;
  o.max_logits_rows = 64;
  o.max_model_len = 256;
  o.cuda_graphs = graphs;
  CudaModelRunner gpu(
      ctx, m.cfg, [&](const std::string &n) { return *m.find(n); }, o);
  const auto cmp = run_schedule({cpu.get(), &gpu}, static_cast<int>(window), 5);
  std::printf(
      "hd %d window %d graphs %d: cuda vs cpu %d rows, worst top-20 |logprob error| %.3g (past "
      "the window %.3g), greedy %d/%d decisive rows agree\n",
      static_cast<int>(hd), static_cast<int>(window), graphs, cmp[1].rows, cmp[1].worst,
      cmp[1].worst_late, cmp[1].agreed, cmp[1].decisive);
  EXPECT_GT(cmp[1].rows, 40);
  EXPECT_LT(cmp[1].worst, kLogprobTol);
  EXPECT_EQ(cmp[1].agreed, cmp[1].decisive);
}

TEST(SlidingWindowModel, CudaMatchesCpuGeneralKernel) {
  KEEL_REQUIRE_CUDA_DEVICE();
  check_gpu_vs_cpu(4, 2, 32, 8, true);
}

TEST(SlidingWindowModel, CudaMatchesCpuFlashAndDecodeKernels) {
  KEEL_REQUIRE_CUDA_DEVICE();
  ASSERT_TRUE(decode_attention_supported(8, 2, 64));
  ASSERT_TRUE(flash_attention_supported(8, 2, 64));
  check_gpu_vs_cpu(8, 2, 64, 12, true);
  check_gpu_vs_cpu(8, 2, 64, 12, false);
}

// gpt-oss's attention (alternating windows, sinks, q/k/v/o biases) with partial rotary:
// the general kernel (head_dim 32), then flash prefill and decode (head_dim 64, group 4)
// with split-K sized per window, graphs on and off.
TEST(SlidingWindowModel, CudaMatchesCpuGptOssAttention) {
  KEEL_REQUIRE_CUDA_DEVICE();
  check_gpu_vs_cpu(4, 2, 32, 8, true, "auto", true);
  check_gpu_vs_cpu(8, 2, 64, 12, true, "auto", true);
  check_gpu_vs_cpu(8, 2, 64, 12, false, "auto", true);
}

// The paths a GPU without Hopper's features takes (KEEL_CUDA_FEATURES=baseline: no
// programmatic launch, 99 KB of shared memory per block, so the head_dim-128 flash
// kernel keeps one K/V tile in flight), against the CPU on the same schedule.
TEST(SlidingWindowModel, CudaMatchesCpuBaselineFeatures) {
  KEEL_REQUIRE_CUDA_DEVICE();
  check_gpu_vs_cpu(8, 2, 128, 12, true, "baseline");
  check_gpu_vs_cpu(8, 2, 128, 12, false, "baseline");
  check_gpu_vs_cpu(8, 2, 128, 12, true, "auto");
}

}  // namespace
}  // namespace keel::cuda
