// Checks every drafting head on the device takes (the EAGLE-3 head, the MTP layer): the
// steps against the CPU head, the head rows as MtpInput::head asks, and the head's KV pool
// (exec/cuda/head_block_pool.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/error.h"
#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "exec/mtp_step.h"
#include "support/hidden_batch.h"

namespace keel::cuda::test {

// The target runner of the head tests: 256 positions, a KV pool of `kv_blocks` blocks of 16.
inline CudaRunnerOptions head_target_options(std::int32_t kv_blocks) {
  CudaRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = kv_blocks;
  o.max_batch_tokens = 256;
  o.max_seqs = 4;
  o.max_logits_rows = 16;
  o.max_model_len = 256;
  return o;
}

struct HeadUnderTest {
  std::function<void(MtpCache &, const MtpInput &, MtpOutput &)> forward;
  // Positions [from, from + n), every row through the head with its logits.
  std::function<MtpInput(std::size_t from, std::size_t n)> input;
};

// Rows [0, rows) of a device head's `got` against rows [ref_row, ref_row + rows) of the CPU
// head's `want` for the same input, in `phase` (run_against_cpu's).
using CompareRows = std::function<void(const MtpOutput &got, const MtpOutput &want,
                                       std::size_t ref_row, std::size_t rows, int phase)>;

// The device head against the CPU head over positions [0, n) (n > 8): in one step (phase
// 0); in split steps after a rolled-back detour (phase 1: 5, then 4 dropped by lowering the
// length, 3 again, the rest; each step's rows against the one step's); and k = 3 chained
// drafts from the last position (phase 2: h' and the guess fed back, the CPU's to both, so
// that each compares one step), which truncation drops again.
inline void run_against_cpu(const HeadUnderTest &cpu, const HeadUnderTest &gpu, std::size_t n,
                            std::int64_t H, const CompareRows &compare) {
  MtpCache cpu_cache, gpu_cache;
  MtpOutput want, got;
  cpu.forward(cpu_cache, cpu.input(0, n), want);
  gpu.forward(gpu_cache, gpu.input(0, n), got);
  EXPECT_EQ(gpu_cache.length, static_cast<std::int32_t>(n));
  compare(got, want, 0, n, 0);

  MtpCache split;
  auto step = [&](std::size_t from, std::size_t len) {
    MtpOutput o;
    gpu.forward(split, gpu.input(from, len), o);
    compare(o, want, from, len, 1);
  };
  step(0, 5);
  step(5, 4);
  split.length = 5;  // a detour: positions 5..8 computed again below
  step(5, 3);
  step(8, n - 8);

  std::vector<float> hp(want.hidden.end() - H, want.hidden.end());
  TokenId guess = want.argmax.back();
  const std::int32_t kept = split.length;
  for (int i = 0; i < 3; ++i) {
    MtpInput c;
    c.start_pos = split.length;
    c.hidden = hp;
    c.chained = true;
    c.tokens = std::span<const TokenId>(&guess, 1);
    c.want_logits = true;
    MtpOutput cw, cg;
    cpu.forward(cpu_cache, c, cw);
    gpu.forward(split, c, cg);
    compare(cg, cw, 0, 1, 2);
    hp = cw.hidden;
    guess = cw.argmax[0];
  }
  split.length = kept;
}

// Only the last row through the head (a draft) and none (catching up): the same h', the
// last row's argmax as kAll's. Returns kAll's output.
inline MtpOutput expect_head_rows_as_asked(const HeadUnderTest &h) {
  MtpCache all, last, none;
  MtpOutput oa, ol, on;
  h.forward(all, h.input(0, 9), oa);
  MtpInput in = h.input(0, 9);
  in.head = MtpInput::Head::kLast;
  in.want_logits = false;
  h.forward(last, in, ol);
  in.head = MtpInput::Head::kNone;
  h.forward(none, in, on);
  EXPECT_EQ(ol.argmax.size(), 1u);
  if (!ol.argmax.empty()) EXPECT_EQ(ol.argmax[0], oa.argmax.back());
  EXPECT_TRUE(ol.logits.empty());
  EXPECT_TRUE(on.argmax.empty());
  EXPECT_LT(rel_err(ol.hidden, oa.hidden), 1e-6);
  EXPECT_LT(rel_err(on.hidden, oa.hidden), 1e-6);
  return oa;
}

// A pool of 4 blocks of 16 positions (`pool_bytes` in all, `free_blocks` left): a cache takes
// blocks as its positions grow and gives them back when destroyed; a step past what is left
// is refused with Error(kResourceExhausted) before anything changes; lowering the length
// keeps the blocks.
inline void expect_pool_takes_and_gives_back(const HeadUnderTest &h,
                                             const std::function<std::int32_t()> &free_blocks,
                                             std::int64_t pool_bytes) {
  {
    MtpCache a;
    MtpOutput o;
    h.forward(a, h.input(0, 20), o);  // positions 0..19: 2 blocks
    EXPECT_EQ(free_blocks(), 2);
    ASSERT_NE(a.device, nullptr);
    EXPECT_EQ(a.device->bytes(), 2 * pool_bytes / 4);
    MtpCache b;
    try {
      h.forward(b, h.input(0, 40), o);  // 3 blocks: one too many
      ADD_FAILURE() << "a step past the pool was accepted";
    } catch (const Error &e) {
      EXPECT_EQ(e.code(), ErrorCode::kResourceExhausted) << e.what();
    }
    EXPECT_EQ(b.length, 0);
    EXPECT_EQ(free_blocks(), 2);
    h.forward(b, h.input(0, 30), o);  // 2 blocks: fits
    EXPECT_EQ(free_blocks(), 0);
    b.length = 3;  // a truncation keeps the blocks
    h.forward(b, h.input(3, 1), o);
    EXPECT_EQ(free_blocks(), 0);
  }
  EXPECT_EQ(free_blocks(), 4);
}

}  // namespace keel::cuda::test
