// The CUDA EAGLE-3 head (exec/cuda/cuda_eagle3_head.h) against the CPU head
// (exec/arch/eagle3_head.h), both opened through their runners (ModelRunner::open_eagle3_head)
// on a tiny random llama target and a tiny random head whose weights are bf16 values (so
// both compute with the same numbers; the device rounds activations to bf16 where the CPU
// keeps f32): 200 positions in one step (two passes of kChunk), the same positions in split
// steps after a rolled-back detour, and 3 chained drafts, with the target's own aux rows;
// with norm_before_residual too. Through the drafter (engine/eagle3_drafter.h) on the CUDA
// runner's hidden rows, a head wired to copy the target's prediction drafts it. h' and the draft
// logits within a stated bf16 bound, the argmax the same wherever the CPU's top two logits are
// apart by more than the device's rounding can move them. And the head's KV pool: blocks taken per
// request, given back with the cache, and a request past the pool refused before anything changes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "core/half.h"
#include "cuda_test_util.h"
#include "engine/eagle3_drafter.h"
#include "exec/arch/weight_binding.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/cuda/cuda_eagle3_head.h"
#include "exec/cuda/cuda_model_runner.h"
#include "formats/make_eagle3_head.h"
#include "formats/make_model.h"
#include "head_checks.h"
#include "support/copying_eagle3_head.h"

namespace keel::cuda {
namespace {

using test::rel_err;

std::filesystem::path scratch() {
  return std::filesystem::temp_directory_path() /
         ("keel-cuda-eagle3-" + std::to_string(::getpid()));
}

const std::filesystem::path &target_dir() {
  static const auto p = [] {
    const auto d = scratch() / "target";
    std::filesystem::remove_all(d);
    MakeModelOptions o;
    o.arch = "llama";
    o.shape = "tiny";  // hidden 64, 4 heads of 16 over 2 KV heads, vocabulary 512
    o.layers = 2;
    o.dtype = DType::kBF16;
    o.seed = 5;
    o.out = d;
    o.threads = 2;
    make_model(o);
    return d;
  }();
  return p;
}

// A random head for the target, every weight a bf16 value; with norm_before_residual in
// its config when asked.
std::filesystem::path head_dir(bool norm_before_residual) {
  const auto d = scratch() / (norm_before_residual ? "head-nbr" : "head");
  std::filesystem::remove_all(d);
  ExecContext ctx(1);
  MakeEagle3Options o;
  o.target = cpu::CpuModelRunner::open(target_dir(), ctx, {4, 16})->config();
  o.seed = 11;
  o.out = d;
  o.edit = [](const std::string &, std::vector<float> &v) {
    for (float &x : v) x = bf16_to_f32(f32_to_bf16(x));
  };
  make_eagle3_head(o);
  if (norm_before_residual) {
    std::ifstream in(d / "config.json");
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(in);
    j["norm_before_residual"] = true;
    std::ofstream(d / "config.json") << j.dump(2);
  }
  return d;
}

struct Heads {
  ExecContext cpu_ctx{2};
  std::unique_ptr<cpu::CpuModelRunner> cpu;
  CudaContext ctx;
  std::unique_ptr<CudaModelRunner> gpu;
  std::unique_ptr<Eagle3Runner> cpu_head, gpu_head;
  std::vector<TokenId> tokens;  // the prompt
  std::vector<float> aux;       // the target's aux rows of every prompt position
  explicit Heads(const std::filesystem::path &head, std::int32_t kv_blocks = 32) {
    cpu = cpu::CpuModelRunner::open(target_dir(), cpu_ctx, {32, 16});
    gpu = CudaModelRunner::open(target_dir(), ctx, test::head_target_options(kv_blocks));
    cpu_head = cpu->open_eagle3_head(head);
    gpu_head = gpu->open_eagle3_head(head);
    // A prompt of 201 tokens and the target's own aux rows for it (the CPU runner's).
    std::mt19937 rng(3);
    std::uniform_int_distribution<TokenId> tok(0, 511);
    for (int i = 0; i < 201; ++i) tokens.push_back(tok(rng));
    ForwardOutput out;
    cpu->forward(
        keel::test::hidden_batch(tokens, cpu_head->aux_layers(), SequenceSlice::Logits::kNone),
        out);
    aux = std::move(out.hidden);
  }
  // The CPU and device heads as head_checks.h drives them.
  test::HeadUnderTest host_head() {
    return {[this](MtpCache &c, const MtpInput &in, MtpOutput &o) { cpu_head->forward(c, in, o); },
            [this](std::size_t from, std::size_t n) { return input(from, n); }};
  }
  test::HeadUnderTest device_head() {
    return {[this](MtpCache &c, const MtpInput &in, MtpOutput &o) { gpu_head->forward(c, in, o); },
            [this](std::size_t from, std::size_t n) { return input(from, n); }};
  }
  // The input of positions [from, from + n): aux rows and x_{t+1}.
  MtpInput input(std::size_t from, std::size_t n) const {
    const auto w = static_cast<std::size_t>(cpu_head->aux_width());
    MtpInput in;
    in.start_pos = static_cast<std::int32_t>(from);
    in.hidden = std::span<const float>(aux).subspan(from * w, n * w);
    in.tokens = std::span<const TokenId>(tokens).subspan(from + 1, n);
    in.head = MtpInput::Head::kAll;
    in.want_logits = true;
    return in;
  }
};

// The device rounds every GEMM's input to bf16 (a relative 2^-9 each: the aux rows, the
// [e ; g] concatenation, the attention output, the MLP's activations) and accumulates in
// f32; the CPU keeps f32 throughout. h' rows and logit rows agree within 3e-2 of their
// norm (the first H100 run, session 21: 2.14e-2 and 2.29e-2 without norm_before_residual,
// 8.0e-3 and 8.5e-3 with it); a wrong norm, a swapped concatenation or a missed residual is
// off by far more.
constexpr double kTol = 3e-2;
// Logits are about unit-sized, so the device moves each by ~1e-2 at most: the argmax must
// agree wherever the CPU's best two are further apart than this.
constexpr float kMargin = 0.1f;

struct Compared {
  double worst_hidden = 0, worst_logits = 0;
  int argmax_checked = 0, argmax_differs = 0;
};

// Rows [0, rows) of `got` against rows [ref_row, ref_row + rows) of `want` (same input).
void compare(const MtpOutput &got, const MtpOutput &want, std::size_t ref_row, std::size_t rows,
             std::int64_t H, std::int64_t Vd, Compared &c) {
  ASSERT_EQ(got.hidden.size(), rows * H);
  ASSERT_EQ(got.argmax.size(), rows);
  ASSERT_EQ(got.logits.size(), rows * Vd);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t w = ref_row + r;
    auto slice = [](const std::vector<float> &v, std::size_t at, std::int64_t n) {
      return std::vector<float>(v.begin() + at * n, v.begin() + (at + 1) * n);
    };
    c.worst_hidden =
        std::max(c.worst_hidden, rel_err(slice(got.hidden, r, H), slice(want.hidden, w, H)));
    const std::vector<float> wl = slice(want.logits, w, Vd);
    c.worst_logits = std::max(c.worst_logits, rel_err(slice(got.logits, r, Vd), wl));
    std::vector<float> sorted = wl;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > kMargin) {
      ++c.argmax_checked;
      if (got.argmax[r] != want.argmax[w]) ++c.argmax_differs;
    }
  }
}

void run_against_cpu(bool norm_before_residual) {
  Heads h(head_dir(norm_before_residual));
  ASSERT_EQ(h.gpu_head->config().norm_before_residual, norm_before_residual);
  ASSERT_EQ(h.gpu_head->aux_layers(), h.cpu_head->aux_layers());
  ASSERT_EQ(h.gpu_head->aux_width(), h.cpu_head->aux_width());
  const std::int64_t H = h.gpu_head->hidden_size(), Vd = h.gpu_head->config().draft_vocab_size;
  const std::size_t n = h.tokens.size() - 1;  // 200 positions: two passes of kChunk
  ASSERT_GT(n, static_cast<std::size_t>(CudaEagle3Head::kChunk));

  Compared one, parts, chain;
  Compared *phases[] = {&one, &parts, &chain};
  test::run_against_cpu(
      h.host_head(), h.device_head(), n, H,
      [&](const MtpOutput &got, const MtpOutput &want, std::size_t ref_row, std::size_t rows,
          int phase) { compare(got, want, ref_row, rows, H, Vd, *phases[phase]); });
  for (const Compared *c : phases) {
    EXPECT_LT(c->worst_hidden, kTol);
    EXPECT_LT(c->worst_logits, kTol);
    EXPECT_EQ(c->argmax_differs, 0);
  }
  EXPECT_GT(one.argmax_checked, static_cast<int>(n / 2));  // not vacuous
  std::printf(
      "[ eagle3 ] norm_before_residual %d: h' within %.2e, logits within %.2e; argmax checked "
      "at %d + %d + %d rows (margin > %.2f), %d + %d + %d differ\n",
      norm_before_residual, std::max({one.worst_hidden, parts.worst_hidden, chain.worst_hidden}),
      std::max({one.worst_logits, parts.worst_logits, chain.worst_logits}), one.argmax_checked,
      parts.argmax_checked, chain.argmax_checked, kMargin, one.argmax_differs, parts.argmax_differs,
      chain.argmax_differs);
}

TEST(CudaEagle3Head, MatchesTheCpuHead) {
  KEEL_REQUIRE_CUDA_DEVICE();
  run_against_cpu(false);
}

TEST(CudaEagle3Head, MatchesTheCpuHeadWithNormBeforeResidual) {
  KEEL_REQUIRE_CUDA_DEVICE();
  run_against_cpu(true);
}

// Only the last row through lm_head (a draft) and none (catching up): the same h', the
// last row's argmax as kAll's.
TEST(CudaEagle3Head, HeadRowsAsAsked) {
  KEEL_REQUIRE_CUDA_DEVICE();
  Heads h(head_dir(false));
  const MtpOutput oa = test::expect_head_rows_as_asked(h.device_head());
  for (const TokenId t : oa.argmax) {  // target ids of the draft vocabulary
    EXPECT_GE(t, 0);
    EXPECT_LT(t, 512);
  }
}

// The pool: as many blocks as the target's KV pool (4 of 16 positions here); a cache takes
// blocks as its positions grow and gives them back when destroyed; a step past what is left
// is refused with Error(kResourceExhausted) before anything changes.
TEST(CudaEagle3Head, KvPoolTakesAndGivesBackBlocks) {
  KEEL_REQUIRE_CUDA_DEVICE();
  Heads h(head_dir(false), 4);
  auto *head = dynamic_cast<CudaEagle3Head *>(h.gpu_head.get());
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->pool_blocks(), 4);
  // The pool, the scratch and the target's hidden rows of 3 layers ([256, 3 x 64] f32).
  EXPECT_GT(head->reserved_bytes(), head->pool_bytes() + 256 * 3 * 64 * 4);
  test::expect_pool_takes_and_gives_back(
      h.device_head(), [&] { return head->free_blocks(); }, head->pool_bytes());
}

// A head whose guess is the target's own prediction at the position before
// (support/copying_eagle3_head.h, as the CPU engine test's). Through Eagle3Drafter on the
// CUDA runner:
// the runner's hidden rows of the aux layers, the head on the device, the first draft is
// the argmax of the runner's own logits at the last prompt position; the chained one
// repeats it.
TEST(CudaEagle3Head, CopyingHeadDraftsTheTargetsPrediction) {
  KEEL_REQUIRE_CUDA_DEVICE();
  const auto dir = scratch() / "copying";
  {
    std::filesystem::remove_all(dir);
    ExecContext cpu_ctx(1);
    auto cpu = cpu::CpuModelRunner::open(target_dir(), cpu_ctx, {4, 16});
    MakeEagle3Options o;
    o.target = cpu->config();
    o.seed = 11;
    o.out = dir;
    keel::test::make_copying(o, arch::tensor_f32(cpu->model().lm_head()), true);
    make_eagle3_head(o);
  }
  CudaContext ctx;
  auto gpu = CudaModelRunner::open(target_dir(), ctx, test::head_target_options(32));
  auto d = Eagle3Drafter::open(dir, *gpu);
  ASSERT_EQ(d->hidden_layers().size(), 3u);
  ASSERT_EQ(d->hidden_layers().back(), 1);  // the last layer: its output is the final hidden
  const std::int64_t V = gpu->config().vocab_size;
  std::mt19937 rng(21);
  std::uniform_int_distribution<TokenId> tok(0, static_cast<TokenId>(V - 1));
  int checked = 0;
  // 24 prompts: about half have a margin over 1e-2 (4 of the first 8 on an H100).
  for (int p = 0; p < 24; ++p) {
    std::vector<TokenId> tokens;
    for (int i = 0; i < 9 + p; ++i) tokens.push_back(tok(rng));
    ForwardOutput out;
    gpu->forward(keel::test::hidden_batch(tokens, d->hidden_layers(), SequenceSlice::Logits::kLast),
                 out);
    ASSERT_EQ(out.hidden.size(),
              tokens.size() * 3 * static_cast<std::size_t>(gpu->config().hidden_size));
    const RequestId id{static_cast<std::uint64_t>(100 + p)};
    d->observe_hidden(id, tokens, 0, static_cast<std::int32_t>(tokens.size()), out.hidden);
    std::vector<float> sorted = out.logits;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    const auto want = static_cast<TokenId>(std::max_element(out.logits.begin(), out.logits.end()) -
                                           out.logits.begin());
    tokens.push_back((want + 1 + p) % static_cast<TokenId>(V));  // any sampled token
    std::vector<TokenId> draft;
    d->propose(id, tokens, 2, draft);
    ASSERT_EQ(draft.size(), 2u);
    EXPECT_EQ(draft[1], draft[0]) << "prompt " << p;  // h' == g: the chain repeats it
    // The head reads bf16 of the hidden state the runner's norm reads in f32: its logits
    // (about 0.16 in size, make_model's lm_head over 64 dimensions) move by ~1e-3 at most.
    if (sorted[0] - sorted[1] > 1e-2f) {
      ++checked;
      EXPECT_EQ(draft[0], want) << "prompt " << p;
    }
    d->forget(id);
  }
  EXPECT_GE(checked, 8);
  EXPECT_EQ(d->kv_bytes(), 0);
}

}  // namespace
}  // namespace keel::cuda
