#include "kv/block_hash.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace keel {
namespace {

TEST(BlockHash, DeterministicAndSensitiveToEveryInput) {
  const auto m = ModelFingerprint::of("model-a");
  const std::vector<TokenId> t = {1, 2, 3, 4};
  const BlockHash base = hash_block(m, nullptr, t);
  EXPECT_EQ(base, hash_block(m, nullptr, t));

  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
  auto add = [&](const BlockHash &x) { return seen.insert({x.lo, x.hi}).second; };
  EXPECT_TRUE(add(base));
  EXPECT_TRUE(add(hash_block(ModelFingerprint::of("model-b"), nullptr, t)));  // model
  EXPECT_TRUE(add(hash_block(m, &base, t)));                                  // parent
  const BlockHash other_parent = hash_block(m, nullptr, std::vector<TokenId>{9});
  EXPECT_TRUE(add(hash_block(m, &other_parent, t)));
  EXPECT_TRUE(add(hash_block(m, nullptr, std::vector<TokenId>{1, 2, 3, 5})));  // tokens
  EXPECT_TRUE(add(hash_block(m, nullptr, std::vector<TokenId>{2, 1, 3, 4})));  // order
  EXPECT_TRUE(add(hash_block(m, nullptr, t, "salt")));                         // extra keys
  EXPECT_TRUE(add(hash_block(m, nullptr, t, "salu")));
  // A zero parent is not the same as no parent.
  const BlockHash zero{};
  EXPECT_TRUE(add(hash_block(m, &zero, t)));
}

TEST(BlockHash, ChainNamesTheWholePrefix) {
  const auto m = ModelFingerprint::of("m");
  const std::vector<TokenId> a0 = {1, 2}, b0 = {7, 8}, tail = {3, 4};
  const BlockHash ha = hash_block(m, nullptr, a0);
  const BlockHash hb = hash_block(m, nullptr, b0);
  // Same tokens in block 1, different block 0: different keys.
  EXPECT_NE(hash_block(m, &ha, tail), hash_block(m, &hb, tail));
}

TEST(BlockHash, NoCollisionsAcrossManyBlocks) {
  const auto m = ModelFingerprint::of("m");
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
  BlockHash parent{};
  for (int i = 0; i < 20000; ++i) {
    std::vector<TokenId> t(16, i % 7);
    t[i % 16] = i;
    parent = hash_block(m, i % 3 == 0 ? nullptr : &parent, t);
    ASSERT_TRUE(seen.insert({parent.lo, parent.hi}).second) << i;
  }
  EXPECT_EQ(parent.hex().size(), 32u);
}

TEST(BlockHash, LongExtraKeysUseTheHeap) {
  const auto m = ModelFingerprint::of("m");
  const std::vector<TokenId> t(16, 3);
  const std::string big(4096, 'x');
  std::string big2 = big;
  big2.back() = 'y';
  EXPECT_NE(hash_block(m, nullptr, t, big), hash_block(m, nullptr, t, big2));
  EXPECT_EQ(hash_block(m, nullptr, t, big), hash_block(m, nullptr, t, big));
}

}  // namespace
}  // namespace keel
