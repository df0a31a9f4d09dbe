// A sequence's logits are bit-identical whether it runs alone or in a ragged batch with
// other sequences' prefill chunks and decode tokens.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "model_harness.h"
#include "support/paths.h"

namespace keel::test {
namespace {

std::vector<TokenId> prompt(std::uint32_t seed, int n, int vocab) {
  std::vector<TokenId> p;
  for (int i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    p.push_back(static_cast<TokenId>(3 + (seed >> 8) % (vocab - 3)));
  }
  return p;
}

TokenId argmax(const ForwardOutput &o, std::size_t row) {
  const float *r = o.logits.data() + row * o.vocab_size;
  return static_cast<TokenId>(std::max_element(r, r + o.vocab_size) - r);
}

// fixture: a folder under tests/fixtures.
void ragged_vs_alone(const std::string &fixture) {
  const auto dir = fixtures_dir() / fixture;
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "missing fixture " << dir;
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(dir, ctx, {128, 16});
  const int V = static_cast<int>(runner->config().vocab_size);
  const std::vector<int> lens = {37, 5, 20};
  constexpr int kSteps = 6;

  // Alone: whole-prompt prefill, then greedy decode; keep every logits row.
  std::vector<std::vector<std::vector<float>>> alone(lens.size());
  std::vector<std::vector<TokenId>> alone_tokens(lens.size());
  for (std::size_t s = 0; s < lens.size(); ++s) {
    BlockHandout blocks(128, 1);
    PagedSeq seq;
    seq.tokens = prompt(static_cast<std::uint32_t>(s + 1), lens[s], V);
    auto o = run_step(*runner, blocks, {{&seq, lens[s], SequenceSlice::Logits::kLast}});
    for (int k = 0; k < kSteps; ++k) {
      alone[s].emplace_back(o.logits.begin(), o.logits.end());
      seq.tokens.push_back(argmax(o, 0));
      o = run_step(*runner, blocks, {{&seq, 1, SequenceSlice::Logits::kLast}});
    }
    alone_tokens[s] = seq.tokens;
  }

  // Together: sequence 0 prefills in chunks of 16 while the others join, decode and
  // mix with it; blocks come from one shared, scrambled pool.
  BlockHandout blocks(128, 99);
  std::vector<PagedSeq> seqs(lens.size());
  for (std::size_t s = 0; s < lens.size(); ++s)
    seqs[s].tokens = prompt(static_cast<std::uint32_t>(s + 1), lens[s], V);
  std::vector<int> produced(lens.size(), 0);
  for (int step = 0; step < 64; ++step) {
    std::vector<StepItem> items;
    for (std::size_t s = 0; s < lens.size(); ++s) {
      if (produced[s] >= kSteps) continue;
      if (s == 2 && step < 2) continue;  // joins late
      PagedSeq &q = seqs[s];
      const int left = static_cast<int>(q.tokens.size()) - q.computed;
      const int n = std::min(left, 16);
      items.push_back(
          {&q, n, n == left ? SequenceSlice::Logits::kLast : SequenceSlice::Logits::kNone});
    }
    if (items.empty()) break;
    std::reverse(items.begin(), items.end());  // batch order differs from the alone order
    auto o = run_step(*runner, blocks, items);
    for (std::size_t r = 0; r < o.row_seq.size(); ++r) {
      PagedSeq *q = items[o.row_seq[r]].seq;
      const std::size_t s = static_cast<std::size_t>(q - seqs.data());
      const auto &want = alone[s][produced[s]];
      ASSERT_EQ(0, std::memcmp(want.data(), o.logits.data() + r * o.vocab_size,
                               want.size() * sizeof(float)))
          << "sequence " << s << " step " << produced[s];
      q->tokens.push_back(argmax(o, r));
      ++produced[s];
    }
  }
  for (std::size_t s = 0; s < lens.size(); ++s) {
    EXPECT_EQ(produced[s], kSteps);
    std::vector<TokenId> got(seqs[s].tokens.begin(),
                             seqs[s].tokens.begin() + alone_tokens[s].size() - 1);
    std::vector<TokenId> want(alone_tokens[s].begin(), alone_tokens[s].end() - 1);
    EXPECT_EQ(got, want);
  }
}

TEST(CpuRaggedBatch, SameLogitsAloneAndBatchedF32) { ragged_vs_alone("models/qwen3_f32"); }
TEST(CpuRaggedBatch, SameLogitsAloneAndBatchedBf16Mqa) {
  ragged_vs_alone("models/llama3_mqa_bf16");
}
// Skips until scripts/ref/moe_fixtures.py's fixtures are in tests/fixtures/moe_models.
TEST(CpuRaggedBatch, SameLogitsAloneAndBatchedQwen3Moe) {
  ragged_vs_alone("moe_models/qwen3_moe_bf16");
}
TEST(CpuRaggedBatch, SameLogitsAloneAndBatchedGlm4Moe) {
  ragged_vs_alone("moe_models/glm4_moe_bf16");
}
TEST(CpuRaggedBatch, SameLogitsAloneAndBatchedGptOss) {
  ragged_vs_alone("moe_models/gpt_oss_bf16");
}

TEST(CpuRunner, RejectsBadBatches) {
  const auto dir = fixtures_dir() / "models" / "llama_gqa_f32";
  ExecContext ctx(1);
  auto runner = cpu::CpuModelRunner::open(dir, ctx, {8, 16});
  ForwardOutput out;
  ForwardBatch b;
  b.tokens = {5, 6};
  b.seqs.push_back({0, 2, 0, 0, 1, SequenceSlice::Logits::kLast});
  b.block_table = {9};  // out of range
  EXPECT_THROW(runner->forward(b, out), Error);
  b.block_table = {0};
  b.tokens = {5, 100000};  // out of the vocabulary
  EXPECT_THROW(runner->forward(b, out), Error);
  b.tokens = {5, 6};
  b.seqs[0].start_pos = 15;  // needs a second block
  EXPECT_THROW(runner->forward(b, out), Error);
  b.seqs[0].start_pos = 0;
  b.seqs[0].num_tokens = 3;  // more tokens than the batch holds
  EXPECT_THROW(runner->forward(b, out), Error);
  b.seqs[0].num_tokens = 2;
  runner->forward(b, out);
  EXPECT_EQ(out.logits.size(), static_cast<std::size_t>(out.vocab_size));
}

TEST(CpuKv, SaveLoadCopyBitExact) {
  const auto dir = fixtures_dir() / "models" / "llama_gqa_f32";
  ExecContext ctx(1);
  auto runner = cpu::CpuModelRunner::open(dir, ctx, {8, 16});
  BlockHandout blocks(8, 3);
  PagedSeq seq;
  seq.tokens = prompt(5, 20, 300);
  run_step(*runner, blocks, {{&seq, 20, SequenceSlice::Logits::kLast}});
  KvBlockStore &kv = runner->kv();
  std::vector<std::byte> a(kv.block_bytes()), b(kv.block_bytes());
  kv.save_block(seq.blocks[0], a);
  const std::int32_t spare = seq.blocks[0] == 7 ? 6 : 7;
  kv.load_block(spare, a);
  kv.save_block(spare, b);
  EXPECT_EQ(a, b);
  kv.copy_block(seq.blocks[1], spare);
  kv.save_block(spare, b);
  kv.save_block(seq.blocks[1], a);
  EXPECT_EQ(a, b);
  EXPECT_THROW(kv.save_block(8, a), Error);
  std::vector<std::byte> small(10);
  EXPECT_THROW(kv.load_block(0, small), Error);
}

}  // namespace
}  // namespace keel::test
