// The CUDA runner against the CPU reference forward of a tiny random Llama: mixed
// batches (prefill chunks, decode steps, several sequences), logits rows, greedy tokens,
// KV block store round trips, and rejection of malformed batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "tiny_llama.h"

namespace keel::cuda {
namespace {

using test::rel_err;

CudaRunnerOptions small_options() {
  CudaRunnerOptions o;
  o.block_size = 4;
  o.num_kv_blocks = 64;
  o.max_batch_tokens = 64;
  o.max_seqs = 8;
  o.max_logits_rows = 32;
  o.max_model_len = 128;
  return o;
}

std::unique_ptr<CudaModelRunner> make_runner(CudaContext &ctx, const test::TinyLlama &m) {
  return std::make_unique<CudaModelRunner>(
      ctx, m.cfg, [&](const std::string &n) { return m.view(n); }, small_options());
}

std::vector<float> row(const std::vector<float> &logits, std::int64_t r, std::int64_t V) {
  return {logits.begin() + r * V, logits.begin() + (r + 1) * V};
}

std::vector<TokenId> random_tokens(std::size_t n, std::mt19937 &rng) {
  std::uniform_int_distribution<TokenId> d(0, 511);
  std::vector<TokenId> t(n);
  for (auto &x : t) x = d(rng);
  return t;
}

// Appends sequence slice (tokens[from, from + n) of a sequence whose blocks are `blocks`).
void add_seq(ForwardBatch &b, const std::vector<TokenId> &tokens, int from, int n,
             const std::vector<int> &blocks, int block_size, SequenceSlice::Logits logits) {
  SequenceSlice s;
  s.token_offset = b.total_tokens();
  s.num_tokens = n;
  s.start_pos = from;
  s.block_offset = static_cast<int>(b.block_table.size());
  s.num_blocks = (from + n + block_size - 1) / block_size;
  s.logits = logits;
  for (int i = 0; i < s.num_blocks; ++i) b.block_table.push_back(blocks[i]);
  b.tokens.insert(b.tokens.end(), tokens.begin() + from, tokens.begin() + from + n);
  b.seqs.push_back(s);
}

void run_mixed_batches(bool tied) {
  CudaContext ctx;
  test::TinyLlama m(42, tied);
  auto runner = make_runner(ctx, m);
  const std::int64_t V = m.cfg.vocab_size;
  std::mt19937 rng(7);
  const auto a = random_tokens(20, rng), b = random_tokens(11, rng);
  const auto ref_a = m.forward(a), ref_b = m.forward(b);
  // Scattered, interleaved blocks: a uses odd blocks, b even ones from the top.
  std::vector<int> blocks_a, blocks_b;
  for (int i = 0; i < 8; ++i) {
    blocks_a.push_back(2 * i + 1);
    blocks_b.push_back(62 - 2 * i);
  }
  const int bs = 4;
  const double tol = 2e-2;

  // Step 1: a prefills 13 tokens (all logits), b prefills 6 (none).
  ForwardBatch s1;
  add_seq(s1, a, 0, 13, blocks_a, bs, SequenceSlice::Logits::kAll);
  add_seq(s1, b, 0, 6, blocks_b, bs, SequenceSlice::Logits::kNone);
  ForwardOutput o1;
  runner->forward(s1, o1);
  ASSERT_EQ(o1.vocab_size, V);
  ASSERT_EQ(o1.row_seq.size(), 13u);
  for (int r = 0; r < 13; ++r) {
    EXPECT_EQ(o1.row_seq[r], 0);
    EXPECT_EQ(o1.row_pos[r], r);
    EXPECT_LT(rel_err(row(o1.logits, r, V), row(ref_a, r, V)), tol) << "a row " << r;
  }
  // Step 2: b continues with a 5-token chunk (last logits), a decodes one token.
  ForwardBatch s2;
  add_seq(s2, b, 6, 5, blocks_b, bs, SequenceSlice::Logits::kLast);
  add_seq(s2, a, 13, 1, blocks_a, bs, SequenceSlice::Logits::kLast);
  ForwardOutput o2;
  runner->forward(s2, o2);
  ASSERT_EQ(o2.row_seq, (std::vector<std::int32_t>{0, 1}));
  ASSERT_EQ(o2.row_pos, (std::vector<std::int32_t>{10, 13}));
  EXPECT_LT(rel_err(row(o2.logits, 0, V), row(ref_b, 10, V)), tol);
  EXPECT_LT(rel_err(row(o2.logits, 1, V), row(ref_a, 13, V)), tol);
  // Steps 3..8: a decodes one token at a time to the end; greedy tokens match the logits.
  for (int pos = 14; pos < 20; ++pos) {
    ForwardBatch s;
    add_seq(s, a, pos, 1, blocks_a, bs, SequenceSlice::Logits::kLast);
    ForwardOutput o;
    runner->forward(s, o);
    EXPECT_LT(rel_err(o.logits, row(ref_a, pos, V)), tol) << "decode " << pos;
    std::vector<TokenId> next;
    runner->forward_greedy(s, next);  // recomputes the same position: same KV, same result
    ASSERT_EQ(next.size(), 1u);
    EXPECT_EQ(next[0], std::max_element(o.logits.begin(), o.logits.end()) - o.logits.begin());
  }
}

TEST(CudaRunner, MixedBatchesMatchCpuReference) {
  KEEL_REQUIRE_CUDA_DEVICE();
  run_mixed_batches(false);
}

TEST(CudaRunner, TiedEmbeddings) {
  KEEL_REQUIRE_CUDA_DEVICE();
  run_mixed_batches(true);
}

TEST(CudaRunner, KvStoreSaveLoadCopyRoundTrip) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  test::TinyLlama m(43);
  auto runner = make_runner(ctx, m);
  KvBlockStore &kv = runner->kv();
  const std::size_t n = kv.block_bytes();
  EXPECT_EQ(n,
            std::size_t(2) * 2 * 4 * 2 * 32 * 2);  // layers, K|V, block, kv heads, head dim, bf16
  std::mt19937 rng(8);
  std::vector<std::byte> in(n), out(n), out2(n);
  for (auto &b : in) b = static_cast<std::byte>(rng());
  kv.load_block(5, in);
  kv.save_block(5, out);
  EXPECT_EQ(in, out);
  kv.copy_block(5, 9);
  kv.save_block(9, out2);
  EXPECT_EQ(in, out2);
  // A restored prefix gives the same logits as the computed one: prefill a, snapshot its
  // blocks, restore them into other blocks and decode from there.
  const auto a = random_tokens(9, rng);
  ForwardBatch s1;
  add_seq(s1, a, 0, 8, {0, 1, 2}, 4, SequenceSlice::Logits::kNone);
  ForwardOutput o;
  runner->forward(s1, o);
  for (int blk = 0; blk < 2; ++blk) {
    kv.save_block(blk, out);
    kv.load_block(20 + blk, out);
  }
  ForwardBatch s2, s3;
  add_seq(s2, a, 8, 1, {0, 1, 2}, 4, SequenceSlice::Logits::kLast);
  add_seq(s3, a, 8, 1, {20, 21, 22}, 4, SequenceSlice::Logits::kLast);
  ForwardOutput o2, o3;
  runner->forward(s2, o2);
  runner->forward(s3, o3);
  EXPECT_EQ(o2.logits, o3.logits);
  EXPECT_LT(rel_err(o2.logits, row(m.forward(a), 8, m.cfg.vocab_size)), 2e-2);

  EXPECT_THROW(kv.save_block(64, out), Error);
  EXPECT_THROW(kv.load_block(-1, in), Error);
  std::vector<std::byte> short_buf(n - 1);
  EXPECT_THROW(kv.save_block(0, short_buf), Error);
}

TEST(CudaRunner, RejectsMalformedBatches) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  test::TinyLlama m(44);
  auto runner = make_runner(ctx, m);
  std::mt19937 rng(9);
  const auto a = random_tokens(8, rng);
  ForwardOutput o;
  auto expect_invalid = [&](ForwardBatch b) {
    try {
      runner->forward(b, o);
      ADD_FAILURE() << "accepted a malformed batch";
    } catch (const Error &e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  };
  ForwardBatch good;
  add_seq(good, a, 0, 8, {0, 1}, 4, SequenceSlice::Logits::kLast);
  auto b = good;
  b.tokens[3] = 512;  // outside the vocabulary
  expect_invalid(b);
  b = good;
  b.block_table[1] = 64;  // no such block
  expect_invalid(b);
  b = good;
  b.seqs[0].num_blocks = 1;  // blocks do not cover the positions
  expect_invalid(b);
  b = good;
  b.seqs[0].num_tokens = 9;  // more tokens than the batch holds
  expect_invalid(b);
  b = good;
  b.seqs[0].start_pos = 125;  // past max_model_len
  b.seqs[0].num_blocks = 2;
  expect_invalid(b);
  ForwardBatch big;
  std::vector<TokenId> many(65, 1);
  std::vector<int> blocks(17);
  std::iota(blocks.begin(), blocks.end(), 0);
  add_seq(big, many, 0, 65, blocks, 4, SequenceSlice::Logits::kLast);
  expect_invalid(big);  // over max_batch_tokens
  // The runner still works after rejecting all of that.
  runner->forward(good, o);
  EXPECT_EQ(o.row_seq.size(), 1u);
}

TEST(CudaRunner, RejectsUnsupportedConfigs) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  test::TinyLlama m(45);
  auto cfg = m.cfg;
  cfg.num_heads = 128;  // 64 query heads per kv head: more than one attention block holds
  cfg.num_kv_heads = 2;
  EXPECT_THROW(CudaModelRunner(ctx, cfg, std::uint64_t{1}, small_options()), Error);
  cfg = m.cfg;
  cfg.head_dim = 20;
  EXPECT_THROW(CudaModelRunner(ctx, cfg, std::uint64_t{1}, small_options()), Error);
  // A weight with the wrong shape is a format error naming the tensor.
  try {
    CudaModelRunner r(
        ctx, m.cfg,
        [&](const std::string &n) {
          TensorView v = m.view(n);
          if (n == "model.layers.1.mlp.up_proj.weight") v.shape = {255, 128};
          return v;
        },
        small_options());
    ADD_FAILURE() << "accepted a mis-shaped weight";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat);
    EXPECT_NE(std::string(e.what()).find("up_proj"), std::string::npos);
  }
}

}  // namespace
}  // namespace keel::cuda
