// The latent-attention models (deepseek_v3, glm_moe_dsa) on the CUDA runner against the CPU
// runner on make_model's tiny shape, with the bounds of moe_vs_cpu.h: the fixture, the
// options, the row bounds and the chunked-prefill / moved-prefix check that
// mla_model_test.cpp and dsa_model_test.cpp share.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "exec/cpu/cpu_model_runner.h"
#include "exec/cuda/cuda_model_runner.h"
#include "formats/make_model.h"
#include "model/model_harness.h"
#include "moe_vs_cpu.h"

namespace keel::cuda::mla_vs_cpu {

constexpr int kBlocks = 512, kBs = 16;

inline CudaRunnerOptions options() {
  CudaRunnerOptions o;
  o.block_size = kBs;
  o.num_kv_blocks = kBlocks;
  o.max_batch_tokens = 1024;
  o.max_seqs = 32;
  o.max_logits_rows = 128;
  o.max_model_len = 1024;
  return o;
}

// The rows' median and 90th percentile within moe_vs_cpu's bounds; prints them.
inline void expect_row_bounds(moe_vs_cpu::RowErrors &e, std::size_t min_rows, const char *arch,
                              const char *what) {
  std::vector<double> &r = e.rows;
  ASSERT_GE(r.size(), min_rows) << what;
  std::sort(r.begin(), r.end());
  const double median = r[r.size() / 2], p90 = r[r.size() * 9 / 10];
  EXPECT_LT(median, moe_vs_cpu::kRowErrMedian) << what;
  EXPECT_LT(p90, moe_vs_cpu::kRowErrP90) << what;
  std::printf(
      "cuda %s vs cpu, %s: %zu rows (%d decisive), row error median %.3g, p90 %.3g, "
      "worst %.3g; worst top-20 |logprob error| %.3g\n",
      arch, what, r.size(), e.decisive, median, p90, r.back(), e.worst);
}

// A tiny model of `arch` written by make_model, removed when the test ends, open on both
// runners.
class Fixture : public ::testing::Test {
 protected:
  explicit Fixture(const char *arch) : arch_(arch) {}

  void SetUp() override {
    KEEL_REQUIRE_CUDA_DEVICE();
    dir_ = std::filesystem::temp_directory_path() /
           ("keel-cuda-" + std::string(arch_) + "-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    MakeModelOptions o;
    o.arch = arch_;
    o.shape = "tiny";
    o.seed = 5;
    o.out = dir_;
    o.threads = 2;
    make_model(o);
    cctx_ = std::make_unique<CudaContext>();  // after the device check: none without one
    gpu_ = CudaModelRunner::open(dir_, *cctx_, options());
    cpu_ = cpu::CpuModelRunner::open(dir_, xctx_, {kBlocks, kBs});
    V_ = static_cast<int>(gpu_->config().vocab_size);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  void expect_row_bounds(moe_vs_cpu::RowErrors &e, std::size_t min_rows, const char *what) {
    mla_vs_cpu::expect_row_bounds(e, min_rows, arch_, what);
  }

  // moe_vs_cpu::alone_and_batched on a second GPU runner opened with `o`.
  void alone_and_batched_with(const CudaRunnerOptions &o, const char *what) {
    auto gpu = CudaModelRunner::open(dir_, *cctx_, o);
    moe_vs_cpu::RowErrors e;
    moe_vs_cpu::alone_and_batched(*gpu, *cpu_, V_, kBlocks, e);
    if (::testing::Test::HasFatalFailure()) return;
    expect_row_bounds(e, 150, what);
  }

  // Prefills over the split path's rows (the batched step's ~390 rows; with 8, every prompt
  // over 8 tokens) run the split kernel in chunks of that many rows, a query a tile, DSA's
  // selections offset per chunk; and with mla_prefill_chunks off, the simple kernel.
  void prefill_in_split_chunks_and_on_the_simple_kernel(CudaRunnerOptions o) {
    o.kernels.mla_split_max_rows = 8;
    o.kernels.mla_prefill_chunks = true;
    alone_and_batched_with(o, "prefill in chunks of 8 rows");
    if (::testing::Test::HasFatalFailure()) return;
    o.kernels.mla_split_max_rows = 256;
    o.kernels.mla_prefill_chunks = false;
    alone_and_batched_with(o, "prefill on the simple kernel");
  }

  // A 45-token prompt: the first 32 (two blocks) computed and cached, then the rest in
  // chunks of 5 and 3 decode steps, on the CPU and three ways on the GPU: over the prefix
  // as computed, over copies of its blocks (copy_block), and in a second runner that
  // loaded the prefix's block images (save_block / load_block).
  void chunked_prefill_after_cached_prefix_copied_and_restored();

  const char *arch_;
  std::filesystem::path dir_;
  std::unique_ptr<CudaContext> cctx_;
  ExecContext xctx_{2};
  std::unique_ptr<CudaModelRunner> gpu_;
  std::unique_ptr<cpu::CpuModelRunner> cpu_;
  int V_ = 0;
};

inline void Fixture::chunked_prefill_after_cached_prefix_copied_and_restored() {
  using keel::test::BlockHandout;
  using keel::test::PagedSeq;
  using keel::test::run_step;
  using Logits = SequenceSlice::Logits;
  constexpr int kLen = 45, kCached = 32;
  const auto prompt = moe_vs_cpu::pseudo_prompt(7, kLen, V_);
  BlockHandout gb(kBlocks, 21), cb(kBlocks, 22);
  PagedSeq gwarm, cwarm;
  gwarm.tokens.assign(prompt.begin(), prompt.begin() + kCached);
  cwarm.tokens = gwarm.tokens;
  moe_vs_cpu::RowErrors e;
  {
    auto go = run_step(*gpu_, gb, {{&gwarm, kCached, Logits::kLast}});
    auto co = run_step(*cpu_, cb, {{&cwarm, kCached, Logits::kLast}});
    moe_vs_cpu::compare(go, co, V_, "warm prefix", e);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // The rest of the prompt in chunks of 5 (logits of every row), then 3 decode steps of
  // fixed tokens, over `seq` (its first kCached tokens already in `r`'s cache).
  auto rest = [&](ModelRunner &r, BlockHandout &bh, PagedSeq seq) {
    std::vector<ForwardOutput> outs;
    seq.tokens = prompt;
    for (int done = kCached; done < kLen;) {
      const int k = std::min(5, kLen - done);
      outs.push_back(run_step(r, bh, {{&seq, k, Logits::kAll}}));
      done += k;
    }
    for (int step = 0; step < 3; ++step) {
      seq.tokens.push_back(static_cast<TokenId>(3 + (step * 37 + 11) % (V_ - 3)));
      outs.push_back(run_step(r, bh, {{&seq, 1, Logits::kLast}}));
    }
    return outs;
  };
  const auto cpu_outs = rest(*cpu_, cb, cwarm);
  const auto computed = rest(*gpu_, gb, gwarm);
  ASSERT_EQ(computed.size(), cpu_outs.size());
  for (std::size_t i = 0; i < computed.size(); ++i) {
    moe_vs_cpu::compare(computed[i], cpu_outs[i], V_, "chunk after cached prefix", e);
    if (::testing::Test::HasFatalFailure()) return;
  }
  expect_row_bounds(e, 16, "chunked after a cached prefix");

  // The GPU's own outputs over a moved prefix must equal those over the computed one
  // (same kernels, same shapes: deterministic).
  auto same = [&](const std::vector<ForwardOutput> &got, const char *what) {
    ASSERT_EQ(got.size(), computed.size()) << what;
    for (std::size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].logits.size(), computed[i].logits.size()) << what << " step " << i;
      double worst = 0;
      std::size_t at = 0;
      for (std::size_t j = 0; j < got[i].logits.size(); ++j) {
        const double d = std::abs(double(got[i].logits[j]) - computed[i].logits[j]);
        if (!(d <= worst)) worst = d, at = j;
      }
      EXPECT_LT(worst, 1e-3) << what << " step " << i << ": max |logit diff| " << worst
                             << " at row " << at / V_ << " token " << at % V_;
    }
  };
  {  // copy_block: the prefix's two blocks to fresh ids of the same runner
    PagedSeq copied;
    gb.ensure(copied, kCached, kBs);
    ASSERT_EQ(copied.blocks.size(), gwarm.blocks.size());
    for (std::size_t i = 0; i < copied.blocks.size(); ++i)
      gpu_->kv().copy_block(gwarm.blocks[i], copied.blocks[i]);
    copied.computed = kCached;
    same(rest(*gpu_, gb, copied), "copy_block");
  }
  {  // save_block / load_block: the block images into a second runner, same ids
    auto second = CudaModelRunner::open(dir_, *cctx_, options());
    ASSERT_EQ(second->kv().block_bytes(), gpu_->kv().block_bytes());
    std::vector<std::byte> img(gpu_->kv().block_bytes());
    for (const std::int32_t b : gwarm.blocks) {
      gpu_->kv().save_block(b, img);
      second->kv().load_block(b, img);
    }
    BlockHandout sb(kBlocks, 21);  // the same ids as gb gave, the prefix's skipped below
    PagedSeq moved = gwarm;
    PagedSeq skip;
    sb.ensure(skip, kCached, kBs);  // hands out the prefix's ids again: keep them taken
    ASSERT_EQ(skip.blocks, gwarm.blocks);
    same(rest(*second, sb, moved), "save/load into a second runner");
  }
}

}  // namespace keel::cuda::mla_vs_cpu
