// A Qwen3-MoE model (random weights from make_model) on the CPU runner: a sequence's
// logits are bit-identical alone and batched with 31 other sequences, in prefill and
// in decode, through paged KV blocks. (Agreement with transformers comes from the
// fixtures scripts/ref/moe_fixtures.py makes, which test_cpu_vs_transformers reads.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>

#include "formats/make_model.h"
#include "model_harness.h"

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

TEST(CpuMoe, SameLogitsAloneAndBatchedWith31Others) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("keel-moe-model-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  MakeModelOptions o;
  o.arch = "qwen3_moe";
  o.shape = "tiny";
  o.dtype = DType::kBF16;
  o.seed = 5;
  o.out = dir;
  o.threads = 2;
  make_model(o);
  ExecContext ctx(2);
  auto runner = cpu::CpuModelRunner::open(dir, ctx, {256, 16});
  std::filesystem::remove_all(dir);  // the mapping keeps the bytes
  ASSERT_TRUE(runner->config().moe);
  const int V = static_cast<int>(runner->config().vocab_size);
  constexpr int kLen = 29;

  // Alone: all prompt positions, then one decode step.
  std::vector<float> alone_prefill, alone_decode;
  {
    BlockHandout blocks(256, 1);
    PagedSeq seq;
    seq.tokens = prompt(1, kLen, V);
    auto out = run_step(*runner, blocks, {{&seq, kLen, SequenceSlice::Logits::kAll}});
    alone_prefill = out.logits;
    seq.tokens.push_back(17);
    out = run_step(*runner, blocks, {{&seq, 1, SequenceSlice::Logits::kLast}});
    alone_decode = out.logits;
  }

  // Together with 31 others of other lengths, in another order and other blocks.
  BlockHandout blocks(256, 77);
  std::vector<PagedSeq> seqs(32);
  std::vector<StepItem> items;
  for (int s = 31; s >= 0; --s) {
    const int n = s == 0 ? kLen : 1 + (s * 7) % 23;
    seqs[s].tokens = prompt(static_cast<std::uint32_t>(s + 1), n, V);
    items.push_back(
        {&seqs[s], n, s == 0 ? SequenceSlice::Logits::kAll : SequenceSlice::Logits::kLast});
  }
  auto out = run_step(*runner, blocks, items);
  std::size_t first = 0;
  while (first < out.row_seq.size() && items[out.row_seq[first]].seq != &seqs[0]) ++first;
  ASSERT_EQ(0, std::memcmp(alone_prefill.data(), out.logits.data() + first * V,
                           alone_prefill.size() * sizeof(float)));
  items.clear();
  for (int s = 0; s < 32; ++s) {
    seqs[s].tokens.push_back(s == 0 ? 17 : static_cast<TokenId>(3 + s));
    items.push_back({&seqs[s], 1, SequenceSlice::Logits::kLast});
  }
  out = run_step(*runner, blocks, items);
  ASSERT_EQ(out.row_seq.size(), 32u);
  EXPECT_EQ(0, std::memcmp(alone_decode.data(), out.logits.data(), V * sizeof(float)));
  // The logits are not degenerate.
  const auto [lo, hi] = std::minmax_element(alone_decode.begin(), alone_decode.end());
  EXPECT_GT(*hi - *lo, 0.01f);
}

}  // namespace
}  // namespace keel::test
