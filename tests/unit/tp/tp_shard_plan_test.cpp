#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/tp/messages.h"
#include "exec/parallel/shard_plan.h"

namespace keel {
namespace {

ModelConfig config(std::int64_t heads, std::int64_t kv_heads, std::int64_t inter) {
  ModelConfig c;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 16;
  c.intermediate_size = inter;
  c.hidden_size = 64;
  c.vocab_size = 10;
  return c;
}

TEST(TpShardPlan, SplitsHeadsKvHeadsAndMlp) {
  const auto p = parallel::make_shard_plan(config(8, 4, 128), 3, 4);
  EXPECT_EQ(p.heads, 2);
  EXPECT_EQ(p.kv_heads, 1);
  EXPECT_EQ(p.intermediate, 32);
  EXPECT_EQ(p.q_begin(), 3 * 2 * 16);
  EXPECT_EQ(p.kv_begin(), 3 * 16);
  EXPECT_EQ(p.ffn_begin(), 96);
  // vocab 10 over 4 ranks: blocks of 3, 3, 3, 1.
  EXPECT_EQ(p.vocab_begin, 9);
  EXPECT_EQ(p.vocab_count, 1);
  EXPECT_EQ(parallel::make_shard_plan(config(8, 4, 128), 1, 4).vocab_begin, 3);
  EXPECT_EQ(parallel::make_shard_plan(config(8, 4, 128), 1, 4).vocab_count, 3);
}

TEST(TpShardPlan, KvHeadsMustDivide) {
  try {
    parallel::make_shard_plan(config(8, 2, 128), 0, 4);
    FAIL();
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads"), std::string::npos);
  }
  EXPECT_THROW(parallel::make_shard_plan(config(8, 8, 100), 0, 8), Error);  // intermediate
  EXPECT_THROW(parallel::make_shard_plan(config(8, 8, 128), 2, 2), Error);  // rank
}

TEST(TpShardPlan, RowSlicesAreViewsColumnSlicesAreCopies) {
  // [4, 6] f32, element (r, c) = 10 r + c.
  std::vector<float> w(24);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) w[r * 6 + c] = 10.0f * r + c;
  TensorView t{"w", DType::kF32, {4, 6}, reinterpret_cast<const std::byte *>(w.data()), 96};
  const TensorView rows = parallel::slice_rows(t, 2, 2);
  EXPECT_EQ(rows.shape, (std::vector<std::int64_t>{2, 6}));
  EXPECT_EQ(rows.data, t.data + 2 * 24);
  std::string storage;
  const TensorView cols = parallel::slice_cols(t, 2, 3, storage);
  ASSERT_EQ(cols.shape, (std::vector<std::int64_t>{4, 3}));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(cols.data) % 64, 0u);
  const float *f = reinterpret_cast<const float *>(cols.data);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(f[r * 3 + c], 10.0f * r + c + 2);
}

TEST(TpShardPlan, QuantizedColumnSlicesKeepWholeBlocks) {
  std::vector<std::byte> q(2 * 4 * 34);  // [2, 128] q8_0: 4 blocks a row
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<std::byte>(i);
  TensorView t{"q", DType::kQ8_0, {2, 128}, q.data(), q.size()};
  std::string storage;
  const TensorView cols = parallel::slice_cols(t, 64, 64, storage);
  EXPECT_EQ(cols.nbytes, 2u * 2 * 34);
  EXPECT_EQ(std::memcmp(cols.data, q.data() + 2 * 34, 68), 0);
  EXPECT_EQ(std::memcmp(cols.data + 68, q.data() + 4 * 34 + 2 * 34, 68), 0);
  EXPECT_THROW(parallel::slice_cols(t, 16, 32, storage), Error);
}

TEST(TpMessages, ForwardBatchRoundTripsAndTruncationIsAnError) {
  ForwardBatch b;
  b.tokens = {5, 6, 7, 8};
  b.seqs = {{0, 3, 0, 0, 1, SequenceSlice::Logits::kAll}, {3, 1, 20, 1, 2}};
  b.block_table = {4, 9, 11};
  const std::string m = tp::encode_forward(b);
  ForwardBatch d;
  tp::decode_forward(m, d);
  EXPECT_EQ(d.tokens, b.tokens);
  EXPECT_EQ(d.block_table, b.block_table);
  ASSERT_EQ(d.seqs.size(), 2u);
  EXPECT_EQ(d.seqs[0].logits, SequenceSlice::Logits::kAll);
  EXPECT_EQ(d.seqs[1].start_pos, 20);
  EXPECT_EQ(d.seqs[1].num_blocks, 2);
  for (std::size_t n = 0; n < m.size(); ++n)
    EXPECT_THROW(tp::decode_forward(m.substr(0, n), d), Error) << n;
  std::string huge = m.substr(0, 1) + std::string("\xff\xff\xff\x7f\x01\0\0\0\0\0\0\0", 12);
  EXPECT_THROW(tp::decode_forward(huge, d), Error);
  EXPECT_THROW(tp::command_of(std::string(1, '\x09')), Error);
  std::int32_t a = 0, c = 0;
  tp::decode_blocks(tp::encode_blocks(tp::Command::kCopyBlock, 3, 7), a, c);
  EXPECT_EQ(a, 3);
  EXPECT_EQ(c, 7);
  tp::WorkerConfig w;
  w.rank = 2;
  w.size = 4;
  w.model = "/m";
  EXPECT_EQ(tp::decode_config(tp::encode_config(w)).model, "/m");
  EXPECT_THROW(tp::decode_config("{"), Error);
}

}  // namespace
}  // namespace keel
