// Speculative decoding's rollback (issue 30): KvCacheManager::truncate frees the blocks
// past a length, tail first, and refuses to free a block that entered the prefix index.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "kv/kv_cache_manager.h"

namespace keel {
namespace {

KvCacheConfig config(std::int32_t blocks) {
  KvCacheConfig c;
  c.num_blocks = blocks;
  c.block_size = 4;
  c.model = ModelFingerprint::of("truncate-test");
  return c;
}

TEST(KvTruncate, FreesOnlyBlocksPastTheLength) {
  KvCacheManager kv(config(8));
  const RequestId id{1};
  ASSERT_TRUE(kv.allocate_slots(id, 6));   // 2 blocks: 6 accepted tokens
  ASSERT_TRUE(kv.allocate_slots(id, 11));  // + 5 drafts: 3 blocks
  EXPECT_EQ(kv.num_free_blocks(), 5);
  EXPECT_EQ(kv.truncate(id, 8), 1);  // 7 accepted + 1 next: block 2 held only drafts
  EXPECT_EQ(kv.blocks(id).size(), 2u);
  EXPECT_EQ(kv.num_free_blocks(), 6);
  EXPECT_EQ(kv.truncate(id, 8), 0);
  EXPECT_EQ(kv.truncate(RequestId{9}, 0), 0);  // holds nothing
  kv.check_invariants();
}

TEST(KvTruncate, AcceptedBlocksAreCachedRejectedOnesNever) {
  KvCacheManager kv(config(8));
  const RequestId id{1};
  std::vector<TokenId> tokens(5);
  std::iota(tokens.begin(), tokens.end(), 10);
  ASSERT_TRUE(kv.allocate_slots(id, 9));  // 5 tokens + 4 drafts
  // Two drafts accepted: 7 tokens computed, one full block to cache.
  tokens.insert(tokens.end(), {20, 21, 22});
  EXPECT_EQ(kv.cache_full_blocks(id, tokens, 7), 0);
  EXPECT_EQ(kv.truncate(id, 8), 1);
  EXPECT_EQ(kv.pool().num_cached(), 1);
  // A second request finds the accepted block only.
  const PrefixHit hit = kv.get_computed_blocks(tokens);
  EXPECT_EQ(hit.num_tokens, 4);
  // Truncating into a cached block is a bug, not a rollback.
  EXPECT_THROW(kv.truncate(id, 0), Error);
  kv.check_invariants();
}

}  // namespace
}  // namespace keel
