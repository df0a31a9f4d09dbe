#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/error.h"

namespace keel {
namespace {

BlockHash h(std::uint64_t v) { return BlockHash{v, ~v}; }

TEST(BlockPool, AllocatesEveryBlockOnceThenRunsOut) {
  BlockPool pool(8);
  std::set<std::int32_t> seen;
  for (int i = 0; i < 8; ++i) {
    auto b = pool.allocate();
    ASSERT_TRUE(b);
    EXPECT_TRUE(seen.insert(b->value).second);
    EXPECT_EQ(pool.ref_count(*b), 1);
  }
  EXPECT_FALSE(pool.allocate());
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.num_used(), 8);
  pool.check_invariants();
}

TEST(BlockPool, RejectsNonPositiveSize) {
  EXPECT_THROW(BlockPool(0), Error);
  EXPECT_THROW(BlockPool(-3), Error);
}

TEST(BlockPool, DoubleFreeThrows) {
  BlockPool pool(2);
  auto b = *pool.allocate();
  pool.release(b);
  EXPECT_THROW(pool.release(b), Error);
  EXPECT_THROW(pool.release(BlockId{7}), Error);  // out of range
  pool.check_invariants();
}

TEST(BlockPool, FreedBlocksAreReusedLeastRecentlyFreedFirst) {
  BlockPool pool(4);
  std::vector<BlockId> b;
  ASSERT_TRUE(pool.allocate(4, b));
  pool.release(b[2]);
  pool.release(b[0]);
  pool.release(b[3]);
  EXPECT_EQ(pool.allocate()->value, b[2].value);
  EXPECT_EQ(pool.allocate()->value, b[0].value);
  EXPECT_EQ(pool.allocate()->value, b[3].value);
  EXPECT_FALSE(pool.allocate());
}

TEST(BlockPool, AllocateManyIsAllOrNothing) {
  BlockPool pool(3);
  std::vector<BlockId> out;
  EXPECT_FALSE(pool.allocate(4, out));
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_TRUE(pool.allocate(3, out));
  EXPECT_EQ(out.size(), 3u);
}

TEST(BlockPool, FreedCachedBlockStaysFindableUntilReused) {
  BlockPool pool(2);
  auto a = *pool.allocate();
  ASSERT_TRUE(pool.register_hash(a, h(1)));
  pool.release(a);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_cached(), 1);
  ASSERT_TRUE(pool.find(h(1)));
  EXPECT_EQ(pool.find(h(1))->value, a.value);
  // Taking it back (a hit) removes it from the free list without losing the hash.
  pool.touch(a);
  EXPECT_EQ(pool.ref_count(a), 1);
  EXPECT_EQ(pool.num_free(), 1);
  pool.release(a);
  // Allocating both blocks reuses the cached one last-ish and drops its hash.
  auto x = *pool.allocate();
  auto y = *pool.allocate();
  EXPECT_TRUE(x.value == a.value || y.value == a.value);
  EXPECT_FALSE(pool.find(h(1)));
  EXPECT_EQ(pool.hash_of(a), nullptr);
  EXPECT_EQ(pool.num_cached(), 0);
  pool.check_invariants();
}

TEST(BlockPool, DuplicateHashKeepsFirstBlock) {
  BlockPool pool(2);
  auto a = *pool.allocate();
  auto b = *pool.allocate();
  EXPECT_TRUE(pool.register_hash(a, h(5)));
  EXPECT_FALSE(pool.register_hash(b, h(5)));
  EXPECT_EQ(pool.find(h(5))->value, a.value);
  EXPECT_EQ(pool.hash_of(b), nullptr);
  EXPECT_THROW(pool.register_hash(a, h(6)), Error);  // already hashed
  pool.release(b);
  EXPECT_THROW(pool.register_hash(b, h(7)), Error);  // free blocks are not hashed
}

TEST(BlockPool, EvictForgetsHashes) {
  BlockPool pool(3);
  std::vector<BlockId> b;
  ASSERT_TRUE(pool.allocate(3, b));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(pool.register_hash(b[i], h(10 + i)));
  pool.release(b[0]);
  pool.release(b[1]);
  EXPECT_TRUE(pool.evict(b[2]));  // in use: only the hash goes
  EXPECT_FALSE(pool.evict(b[2]));
  EXPECT_EQ(pool.ref_count(b[2]), 1);
  EXPECT_EQ(pool.evict_all_free(), 2);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_FALSE(pool.find(h(10)));
  pool.check_invariants();
}

// Random touch/release/allocate/hash against a reference model of counts.
TEST(BlockPool, RandomOperationsMatchReferenceCounts) {
  std::mt19937 rng(42);
  const int n = 64;
  BlockPool pool(n);
  std::vector<int> refs(n, 0);
  for (int op = 0; op < 20000; ++op) {
    const int kind = static_cast<int>(rng() % 4);
    const int b = static_cast<int>(rng() % n);
    if (kind == 0) {
      auto a = pool.allocate();
      int free_count = 0;
      for (int r : refs) free_count += r == 0;
      ASSERT_EQ(a.has_value(), free_count > 0);
      if (a) {
        ASSERT_EQ(refs[a->value], 0);
        refs[a->value] = 1;
      }
    } else if (kind == 1 && refs[b] > 0) {
      pool.release(BlockId{b});
      --refs[b];
    } else if (kind == 2 && pool.hash_of(BlockId{b}) != nullptr) {
      pool.touch(BlockId{b});  // cache hit on a hashed block
      ++refs[b];
    } else if (kind == 3 && refs[b] > 0 && pool.hash_of(BlockId{b}) == nullptr) {
      pool.register_hash(BlockId{b}, h(rng()));
    }
    if (op % 997 == 0) pool.check_invariants();
  }
  for (int b = 0; b < n; ++b) ASSERT_EQ(pool.ref_count(BlockId{b}), refs[b]);
  for (int b = 0; b < n; ++b)
    while (refs[b]-- > 0) pool.release(BlockId{b});
  EXPECT_EQ(pool.num_free(), n);
  pool.check_invariants();
}

}  // namespace
}  // namespace keel
