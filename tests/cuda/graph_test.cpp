// Decode steps through captured CUDA graphs (padded to a batch bucket, metadata
// refreshed by async copies before each replay) against the same runner run eagerly:
// changing batch sizes, positions and split-K factors, both attention kernels.
#include <gtest/gtest.h>

#include <algorithm>

#include "cuda_test_util.h"
#include "exec/cuda/cuda_model_runner.h"
#include "tiny_llama.h"

namespace keel::cuda {
namespace {

using test::rel_err;

ModelConfig decode_kernel_config() {  // head_dim 64, 4 q heads per kv head: decode kernel
  ModelConfig c;
  c.arch_name = "llama";
  c.vocab_size = 1000;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_layers = 2;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 4096;
  return c;
}

CudaRunnerOptions options(bool graphs) {
  CudaRunnerOptions o;
  o.block_size = 16;
  o.num_kv_blocks = 256;
  o.max_batch_tokens = 512;
  o.max_seqs = 16;
  o.max_logits_rows = 16;
  o.max_model_len = 1024;
  o.cuda_graphs = graphs;
  return o;
}

struct Seq {
  std::vector<TokenId> tokens;
  std::vector<int> blocks;
};

void add(ForwardBatch &b, const Seq &q, int from, int n, SequenceSlice::Logits logits) {
  SequenceSlice s;
  s.token_offset = b.total_tokens();
  s.num_tokens = n;
  s.start_pos = from;
  s.block_offset = static_cast<int>(b.block_table.size());
  s.num_blocks = (from + n + 15) / 16;
  s.logits = logits;
  b.block_table.insert(b.block_table.end(), q.blocks.begin(), q.blocks.begin() + s.num_blocks);
  b.tokens.insert(b.tokens.end(), q.tokens.begin() + from, q.tokens.begin() + from + n);
  b.seqs.push_back(s);
}

void graphs_match_eager(CudaModelRunner &eager, CudaModelRunner &graphed, std::int64_t vocab) {
  std::mt19937 rng(17);
  const int n = 9, steps = 24;
  std::vector<Seq> seqs(n);
  std::vector<int> len(n);
  int next_block = 0;
  for (int i = 0; i < n; ++i) {
    len[i] = 5 + static_cast<int>(rng() % 400);
    seqs[i].tokens.resize(len[i] + steps);
    for (auto &t : seqs[i].tokens) t = static_cast<TokenId>(rng() % vocab);
    for (int j = 0; j < (len[i] + steps + 15) / 16; ++j) seqs[i].blocks.push_back(next_block++);
  }
  ASSERT_LE(next_block, 256);
  ForwardOutput o1, o2;
  for (int i = 0; i < n; ++i) {  // prefill: eager in both
    ForwardBatch b;
    add(b, seqs[i], 0, len[i], SequenceSlice::Logits::kNone);
    eager.forward(b, o1);
    graphed.forward(b, o2);
  }
  EXPECT_EQ(graphed.graphs_captured(), 0u);
  std::vector<int> pos = len;
  for (int step = 0; step < steps; ++step) {
    // A changing subset of sequences in a changing order: sizes 1..9 hit several buckets.
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(1 + step % n);
    ForwardBatch b;
    for (int i : order) add(b, seqs[i], pos[i]++, 1, SequenceSlice::Logits::kLast);
    eager.forward(b, o1);
    graphed.forward(b, o2);
    ASSERT_EQ(o1.row_seq, o2.row_seq);
    ASSERT_EQ(o1.row_pos, o2.row_pos);
    ASSERT_EQ(o1.logits.size(), o2.logits.size());
    for (std::size_t r = 0; r < order.size(); ++r) {
      const std::vector<float> a(o1.logits.begin() + r * vocab,
                                 o1.logits.begin() + (r + 1) * vocab);
      const std::vector<float> g(o2.logits.begin() + r * vocab,
                                 o2.logits.begin() + (r + 1) * vocab);
      EXPECT_LT(rel_err(g, a), 1e-2) << "step " << step << " row " << r;
    }
    std::vector<TokenId> t1, t2;  // greedy through the graph too (recomputes the step)
    for (int i : order) --pos[i];
    ForwardBatch again;
    for (int i : order) add(again, seqs[i], pos[i]++, 1, SequenceSlice::Logits::kLast);
    graphed.forward_greedy(again, t2);
    ASSERT_EQ(t2.size(), order.size());
    for (std::size_t r = 0; r < order.size(); ++r) {
      const auto *row = o2.logits.data() + r * vocab;
      EXPECT_EQ(t2[r], std::max_element(row, row + vocab) - row);
    }
  }
  EXPECT_EQ(eager.graphs_captured(), 0u);
  EXPECT_GE(graphed.graphs_captured(), 3u);  // buckets 1, 2, 4, 8, 16 at least partly
}

TEST(CudaGraphs, DecodeKernelPathMatchesEager) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const ModelConfig cfg = decode_kernel_config();
  CudaModelRunner eager(ctx, cfg, std::uint64_t{77}, options(false));
  CudaModelRunner graphed(ctx, cfg, std::uint64_t{77}, options(true));
  graphs_match_eager(eager, graphed, cfg.vocab_size);
}

TEST(CudaGraphs, GeneralKernelPathMatchesEager) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  test::TinyLlama m(71);  // head_dim 32: single-query tiles go to the general kernel
  auto weights = [&](const std::string &n) { return m.view(n); };
  CudaModelRunner eager(ctx, m.cfg, weights, options(false));
  CudaModelRunner graphed(ctx, m.cfg, weights, options(true));
  graphs_match_eager(eager, graphed, m.cfg.vocab_size);
}

// Speculative verify steps (1 + k tokens a sequence, every token a logits row: kTail)
// replay graphs too: a changing subset of sequences with 0..4 drafts each, a changing
// number of them accepted (the rest overwritten by the next step), graph against eager.
void verify_graphs_match_eager(CudaModelRunner &eager, CudaModelRunner &graphed,
                               std::int64_t vocab) {
  std::mt19937 rng(23);
  const int n = 5, steps = 20, span = 5 * steps + 8;
  std::vector<Seq> seqs(n);
  std::vector<int> pos(n);
  int next_block = 0;
  for (int i = 0; i < n; ++i) {
    pos[i] = 3 + static_cast<int>(rng() % 200);
    seqs[i].tokens.resize(pos[i] + span);
    for (auto &t : seqs[i].tokens) t = static_cast<TokenId>(rng() % vocab);
    for (int j = 0; j < (pos[i] + span + 15) / 16; ++j) seqs[i].blocks.push_back(next_block++);
  }
  ASSERT_LE(next_block, 256);
  ForwardOutput o1, o2;
  for (int i = 0; i < n; ++i) {
    ForwardBatch b;
    add(b, seqs[i], 0, pos[i], SequenceSlice::Logits::kNone);
    eager.forward(b, o1);
    graphed.forward(b, o2);
  }
  const std::size_t before = graphed.graphs_captured();
  for (int step = 0; step < steps; ++step) {
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    order.resize(1 + step % n);
    ForwardBatch b;
    std::vector<int> width;
    for (int i : order) {
      width.push_back(1 + static_cast<int>(rng() % 5));
      add(b, seqs[i], pos[i], width.back(), SequenceSlice::Logits::kTail);
      b.seqs.back().num_logits = width.back();
    }
    eager.forward(b, o1);
    graphed.forward(b, o2);
    ASSERT_EQ(o1.row_seq, o2.row_seq);
    ASSERT_EQ(o1.row_pos, o2.row_pos);
    ASSERT_EQ(o1.logits.size(), o2.logits.size());
    ASSERT_EQ(o1.row_pos.size(), static_cast<std::size_t>(b.total_tokens()));
    for (std::size_t r = 0; r < o1.row_pos.size(); ++r) {
      const std::vector<float> a(o1.logits.begin() + r * vocab,
                                 o1.logits.begin() + (r + 1) * vocab);
      const std::vector<float> g(o2.logits.begin() + r * vocab,
                                 o2.logits.begin() + (r + 1) * vocab);
      EXPECT_LT(rel_err(g, a), 1e-2) << "step " << step << " row " << r;
    }
    for (std::size_t k = 0; k < order.size(); ++k)
      pos[order[k]] += 1 + static_cast<int>(rng() % width[k]);  // accepted: 1..width
  }
  EXPECT_EQ(eager.graphs_captured(), 0u);
  EXPECT_GT(graphed.graphs_captured(), before);
}

TEST(CudaGraphs, VerifyStepsMatchEager) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const ModelConfig cfg = decode_kernel_config();
  CudaRunnerOptions on = options(true), off = options(false);
  on.max_logits_rows = off.max_logits_rows = 64;
  CudaModelRunner eager(ctx, cfg, std::uint64_t{81}, off);
  CudaModelRunner graphed(ctx, cfg, std::uint64_t{81}, on);
  verify_graphs_match_eager(eager, graphed, cfg.vocab_size);
  test::TinyLlama m(83);  // head_dim 32: the general kernel
  auto weights = [&](const std::string &nm) { return m.view(nm); };
  CudaModelRunner eager2(ctx, m.cfg, weights, off);
  CudaModelRunner graphed2(ctx, m.cfg, weights, on);
  verify_graphs_match_eager(eager2, graphed2, m.cfg.vocab_size);
}

// The runner with the tensor-core prefill kernel against the CUDA-core one: a long
// chunked prefill (chunks on cached prefixes) and a mixed step.
TEST(CudaFlashRunner, PrefillMatchesGeneralKernel) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const ModelConfig cfg = decode_kernel_config();
  CudaRunnerOptions on = options(false), off = options(false);
  off.flash_attention = false;
  on.max_logits_rows = off.max_logits_rows = 512;
  CudaModelRunner flash(ctx, cfg, std::uint64_t{79}, on);
  CudaModelRunner general(ctx, cfg, std::uint64_t{79}, off);
  Seq a, b;
  for (int i = 0; i < 700; ++i) a.tokens.push_back((i * 37 + 5) % 1000);
  for (int i = 0; i < 90; ++i) b.tokens.push_back((i * 53 + 1) % 1000);
  for (int i = 0; i < 44; ++i) a.blocks.push_back(i);
  for (int i = 0; i < 6; ++i) b.blocks.push_back(100 + i);
  ForwardOutput o1, o2;
  for (int from = 0; from < 700; from += 350) {
    ForwardBatch chunk;
    add(chunk, a, from, 350, SequenceSlice::Logits::kAll);
    flash.forward(chunk, o1);
    general.forward(chunk, o2);
    ASSERT_EQ(o1.logits.size(), o2.logits.size());
    EXPECT_LT(rel_err(o1.logits, o2.logits), 1e-2) << "chunk at " << from;
  }
  ForwardBatch mixed;
  add(mixed, b, 0, 90, SequenceSlice::Logits::kAll);
  flash.forward(mixed, o1);
  general.forward(mixed, o2);
  EXPECT_LT(rel_err(o1.logits, o2.logits), 1e-2);
}

TEST(CudaGraphs, PrefillAndMixedStepsStayEager) {
  KEEL_REQUIRE_CUDA_DEVICE();
  CudaContext ctx;
  const ModelConfig cfg = decode_kernel_config();
  CudaModelRunner graphed(ctx, cfg, std::uint64_t{78}, options(true));
  Seq a, b;
  for (int i = 0; i < 40; ++i) a.tokens.push_back(i * 7 % 1000), b.tokens.push_back(i * 11 % 1000);
  a.blocks = {0, 1, 2};
  b.blocks = {3, 4, 5};
  ForwardBatch prefill, mixed, no_logits;
  add(prefill, a, 0, 20, SequenceSlice::Logits::kLast);
  add(mixed, a, 20, 1, SequenceSlice::Logits::kLast);
  add(mixed, b, 0, 10, SequenceSlice::Logits::kLast);
  add(no_logits, b, 10, 1, SequenceSlice::Logits::kNone);
  ForwardOutput o;
  graphed.forward(prefill, o);
  graphed.forward(mixed, o);
  graphed.forward(no_logits, o);
  EXPECT_EQ(graphed.graphs_captured(), 0u);
}

}  // namespace
}  // namespace keel::cuda
