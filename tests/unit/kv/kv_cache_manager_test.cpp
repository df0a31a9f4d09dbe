#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "core/error.h"

namespace keel {
namespace {

constexpr std::int32_t kBs = 4;

KvCacheConfig config(std::int32_t blocks, bool caching = true) {
  KvCacheConfig c;
  c.num_blocks = blocks;
  c.block_size = kBs;
  c.enable_prefix_caching = caching;
  c.model = ModelFingerprint::of("test-model");
  return c;
}

std::vector<TokenId> seq(std::int32_t n, TokenId first = 100) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Admits a request the way the scheduler does, computes all of it, caches its blocks.
void run_prompt(KvCacheManager &kv, RequestId id, const std::vector<TokenId> &t) {
  PrefixHit hit = kv.get_computed_blocks(t);
  std::optional<BlockCopy> copy;
  ASSERT_TRUE(kv.allocate_slots(id, static_cast<std::int32_t>(t.size()), &hit, &copy));
  kv.cache_full_blocks(id, t, static_cast<std::int32_t>(t.size()));
  kv.end_step();
}

TEST(KvCacheManager, AllocatesBlocksForTokensAndFreesThem) {
  KvCacheManager kv(config(8));
  EXPECT_TRUE(kv.allocate_slots(RequestId{1}, 5));  // 2 blocks
  EXPECT_EQ(kv.blocks(RequestId{1}).size(), 2u);
  EXPECT_TRUE(kv.allocate_slots(RequestId{1}, 8));  // still 2
  EXPECT_EQ(kv.blocks(RequestId{1}).size(), 2u);
  EXPECT_TRUE(kv.allocate_slots(RequestId{1}, 9));
  EXPECT_EQ(kv.blocks(RequestId{1}).size(), 3u);
  EXPECT_EQ(kv.num_free_blocks(), 5);
  kv.check_invariants();
  kv.free(RequestId{1});
  kv.free(RequestId{1});  // idempotent
  EXPECT_EQ(kv.num_free_blocks(), 8);
  EXPECT_TRUE(kv.blocks(RequestId{1}).empty());
  kv.check_invariants();
}

TEST(KvCacheManager, FailedAllocationChangesNothing) {
  KvCacheManager kv(config(3));
  ASSERT_TRUE(kv.allocate_slots(RequestId{1}, 8));
  EXPECT_FALSE(kv.allocate_slots(RequestId{2}, 8));
  EXPECT_FALSE(kv.holds_blocks(RequestId{2}));
  EXPECT_FALSE(kv.allocate_slots(RequestId{1}, 13));
  EXPECT_EQ(kv.blocks(RequestId{1}).size(), 2u);
  EXPECT_EQ(kv.num_free_blocks(), 1);
  kv.check_invariants();
}

TEST(KvCacheManager, SharedPrefixIsFoundAndShared) {
  KvCacheManager kv(config(16));
  auto a = seq(10);  // blocks: [0..4) [4..8) partial [8..10)
  run_prompt(kv, RequestId{1}, a);
  EXPECT_EQ(kv.pool().num_cached(), 2);
  auto b = a;
  b.resize(8);
  b.push_back(999);
  b.push_back(998);
  b.push_back(997);
  PrefixHit hit = kv.get_computed_blocks(b);
  EXPECT_EQ(hit.num_tokens, 8);
  EXPECT_FALSE(hit.copy_last);
  ASSERT_TRUE(kv.allocate_slots(RequestId{2}, 11, &hit));
  auto ba = kv.blocks(RequestId{1}), bb = kv.blocks(RequestId{2});
  EXPECT_EQ(ba[0], bb[0]);
  EXPECT_EQ(ba[1], bb[1]);
  EXPECT_NE(ba[2], bb[2]);
  EXPECT_EQ(kv.pool().ref_count(bb[0]), 2);
  EXPECT_FALSE(kv.writable(bb[0]));
  EXPECT_TRUE(kv.writable(bb[2]));
  EXPECT_EQ(kv.stats().hit_tokens, 8);
  kv.check_invariants();
}

TEST(KvCacheManager, DifferentFirstBlockMeansNoHit) {
  KvCacheManager kv(config(16));
  run_prompt(kv, RequestId{1}, seq(12));
  auto b = seq(12);
  b[0] = 5;  // same later blocks, other prefix: chained keys differ
  EXPECT_EQ(kv.get_computed_blocks(b).num_tokens, 0);
}

TEST(KvCacheManager, ExtraKeysSeparateCaches) {
  KvCacheManager kv(config(16));
  auto t = seq(9);
  PrefixHit none;
  ASSERT_TRUE(kv.allocate_slots(RequestId{1}, 9, &none));
  kv.cache_full_blocks(RequestId{1}, t, 9, "tenant-a");
  EXPECT_EQ(kv.get_computed_blocks(t, "tenant-a").num_tokens, 8);
  EXPECT_EQ(kv.get_computed_blocks(t, "tenant-b").num_tokens, 0);
  EXPECT_EQ(kv.get_computed_blocks(t).num_tokens, 0);
}

TEST(KvCacheManager, ExactFullHitCopiesTheLastBlock) {
  KvCacheManager kv(config(16));
  auto t = seq(8);
  run_prompt(kv, RequestId{1}, t);
  PrefixHit hit = kv.get_computed_blocks(t);
  EXPECT_EQ(hit.num_tokens, 7);  // the last token is recomputed
  EXPECT_TRUE(hit.copy_last);
  std::optional<BlockCopy> copy;
  ASSERT_TRUE(kv.allocate_slots(RequestId{2}, 8, &hit, &copy));
  ASSERT_TRUE(copy);
  auto ba = kv.blocks(RequestId{1}), bb = kv.blocks(RequestId{2});
  EXPECT_EQ(bb[0], ba[0]);
  EXPECT_EQ(copy->src, ba[1]);
  EXPECT_EQ(copy->dst, bb[1]);
  EXPECT_NE(bb[1], ba[1]);
  EXPECT_TRUE(kv.writable(bb[1]));           // the block the last token is written into
  EXPECT_EQ(kv.pool().ref_count(ba[1]), 2);  // A + pinned source
  kv.check_invariants();
  kv.end_step();
  EXPECT_EQ(kv.pool().ref_count(ba[1]), 1);
  // After the recompute the copy is full again; its hash is already cached, so it
  // stays private and is freed normally.
  kv.cache_full_blocks(RequestId{2}, t, 8);
  EXPECT_EQ(kv.pool().hash_of(bb[1]), nullptr);
  kv.free(RequestId{1});
  kv.free(RequestId{2});
  EXPECT_EQ(kv.num_free_blocks(), 16);
  kv.check_invariants();
}

TEST(KvCacheManager, CopySourceSurvivesEvictionPressureInTheSameStep) {
  KvCacheManager kv(config(3));
  auto t = seq(8);
  run_prompt(kv, RequestId{1}, t);
  kv.free(RequestId{1});  // both blocks free but cached
  PrefixHit hit = kv.get_computed_blocks(t);
  ASSERT_TRUE(hit.copy_last);
  std::optional<BlockCopy> copy;
  ASSERT_TRUE(kv.allocate_slots(RequestId{2}, 8, &hit, &copy));
  // Block 0 shared, source pinned, destination taken: nothing is left to allocate, so
  // the source cannot be reused before the copy runs.
  EXPECT_EQ(kv.num_free_blocks(), 0);
  EXPECT_FALSE(kv.allocate_slots(RequestId{3}, 1));
  kv.end_step();
  EXPECT_EQ(kv.num_free_blocks(), 1);
  kv.check_invariants();
}

TEST(KvCacheManager, FreedPrefixIsStillFoundAndCountsAgainstFreeBlocks) {
  KvCacheManager kv(config(4));
  auto t = seq(9);  // 3 blocks, 2 full
  run_prompt(kv, RequestId{1}, t);
  kv.free(RequestId{1});
  EXPECT_EQ(kv.num_free_blocks(), 4);
  auto u = t;
  u.push_back(1);
  u.push_back(2);
  u.push_back(3);
  u.push_back(4);  // 13 tokens: 2 cached blocks + 2 new
  PrefixHit hit = kv.get_computed_blocks(u);
  EXPECT_EQ(hit.num_tokens, 8);
  ASSERT_TRUE(kv.allocate_slots(RequestId{2}, 13, &hit));
  EXPECT_EQ(kv.num_free_blocks(), 0);
  kv.check_invariants();
  kv.free(RequestId{2});
  // Two cached blocks sitting free do not make room for a request that needs them as new.
  EXPECT_FALSE(kv.allocate_slots(RequestId{3}, 17));
  EXPECT_TRUE(kv.allocate_slots(RequestId{3}, 16));  // reuses all four, evicting hashes
  EXPECT_EQ(kv.pool().num_cached(), 0);
}

TEST(KvCacheManager, TailBlocksAreEvictedBeforeTheirPrefix) {
  KvCacheManager kv(config(4));
  auto t = seq(12);  // 3 full blocks
  run_prompt(kv, RequestId{1}, t);
  kv.free(RequestId{1});
  ASSERT_TRUE(kv.allocate_slots(RequestId{2}, 4));  // one free block is unhashed: taken
  ASSERT_TRUE(kv.allocate_slots(RequestId{3}, 4));  // next victim: the tail block
  auto u = t;
  u.push_back(7);
  EXPECT_EQ(kv.get_computed_blocks(u).num_tokens, 8);
}

TEST(KvCacheManager, CachingOffFindsNothing) {
  KvCacheManager kv(config(8, false));
  auto t = seq(9);
  run_prompt(kv, RequestId{1}, t);
  EXPECT_EQ(kv.pool().num_cached(), 0);
  EXPECT_EQ(kv.get_computed_blocks(t).num_tokens, 0);
}

TEST(KvCacheManager, EvictCachedDropsFreePrefixes) {
  KvCacheManager kv(config(8));
  auto t = seq(9);
  run_prompt(kv, RequestId{1}, t);
  run_prompt(kv, RequestId{2}, seq(8, 500));
  kv.free(RequestId{1});
  EXPECT_EQ(kv.evict_cached(), 2);  // request 2's blocks are held: kept
  EXPECT_EQ(kv.get_computed_blocks(t).num_tokens, 0);
  EXPECT_EQ(kv.get_computed_blocks(seq(9, 500)).num_tokens, 8);
}

TEST(KvCacheManager, HitForARequestHoldingBlocksIsABug) {
  KvCacheManager kv(config(8));
  ASSERT_TRUE(kv.allocate_slots(RequestId{1}, 4));
  PrefixHit hit;
  EXPECT_THROW(kv.allocate_slots(RequestId{1}, 8, &hit), Error);
}

// Random admissions (with shared prefixes), growth, caching, frees and evictions: the
// counts always match the requests' views, and at the end every count is zero.
TEST(KvCacheManagerProperty, RandomWorkloadNeverLeaksOrDoubleFrees) {
  std::mt19937 rng(7);
  KvCacheManager kv(config(48));
  struct Live {
    std::vector<TokenId> tokens;
    std::int32_t computed = 0;
  };
  std::map<std::uint64_t, Live> live;
  std::vector<std::vector<TokenId>> prefixes;
  for (int p = 0; p < 4; ++p) prefixes.push_back(seq(4 + 4 * p, 1000 * p));
  std::uint64_t next = 1;
  for (int op = 0; op < 20000; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 3) {  // admit
      Live l;
      l.tokens = prefixes[rng() % prefixes.size()];
      const int extra = static_cast<int>(rng() % 9);
      for (int i = 0; i < extra; ++i) l.tokens.push_back(static_cast<TokenId>(rng() % 5));
      PrefixHit hit = kv.get_computed_blocks(l.tokens);
      ASSERT_LT(hit.num_tokens, static_cast<std::int32_t>(l.tokens.size()));
      std::optional<BlockCopy> copy;
      const RequestId id{next++};
      if (kv.allocate_slots(id, static_cast<std::int32_t>(l.tokens.size()), &hit, &copy)) {
        if (copy) ASSERT_TRUE(kv.writable(copy->dst));
        l.computed = static_cast<std::int32_t>(l.tokens.size());
        kv.cache_full_blocks(id, l.tokens, l.computed);
        live.emplace(id.value, std::move(l));
      }
      kv.end_step();
    } else if (kind < 7 && !live.empty()) {  // decode one token
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      Live &l = it->second;
      l.tokens.push_back(static_cast<TokenId>(rng() % 5));
      const RequestId id{it->first};
      if (kv.allocate_slots(id, l.computed + 1)) {
        // The slot written is in a block no one else holds.
        const auto blocks = kv.blocks(id);
        ASSERT_TRUE(kv.writable(blocks[l.computed / kBs]));
        ++l.computed;
        kv.cache_full_blocks(id, l.tokens, l.computed);
      } else {
        kv.free(id);  // preempted
        live.erase(it);
      }
    } else if (kind < 9 && !live.empty()) {  // finish
      auto it = std::next(live.begin(), static_cast<long>(rng() % live.size()));
      kv.free(RequestId{it->first});
      live.erase(it);
    } else if (kind == 9) {
      kv.evict_cached();
    }
    if (op % 500 == 0) kv.check_invariants();
  }
  kv.check_invariants();
  for (auto &[id, l] : live) kv.free(RequestId{id});
  kv.check_invariants();
  EXPECT_EQ(kv.num_free_blocks(), 48);
  EXPECT_EQ(kv.num_requests(), 0);
  for (std::int32_t b = 0; b < 48; ++b) EXPECT_EQ(kv.pool().ref_count(BlockId{b}), 0);
  EXPECT_GT(kv.stats().hit_tokens, 0);  // the workload did share prefixes
}

}  // namespace
}  // namespace keel

namespace keel {
namespace {

// What cache_full_blocks reports as stored (Anthropic's cache_creation_input_tokens):
// the tokens of the blocks it newly hashed within the prompt, nothing for blocks a
// prefix hit shared, nothing past the prompt, nothing when another block holds the hash.
TEST(KvCacheManager, ReportsThePromptTokensItStored) {
  KvCacheManager kv(config(16));
  const auto prompt = seq(10);  // 2 full blocks of 4 and a partial one
  ASSERT_TRUE(kv.allocate_slots(RequestId{1}, 10));
  EXPECT_EQ(kv.cache_full_blocks(RequestId{1}, prompt, 6, {}, 10), 4);   // block 0
  EXPECT_EQ(kv.cache_full_blocks(RequestId{1}, prompt, 10, {}, 10), 4);  // block 1
  auto longer = prompt;
  longer.insert(longer.end(), {1, 2});  // output fills block 2: not a prompt token
  ASSERT_TRUE(kv.allocate_slots(RequestId{1}, 12));
  EXPECT_EQ(kv.cache_full_blocks(RequestId{1}, longer, 12, {}, 10), 0);
  kv.end_step();

  // The same prompt again: the hit shares both blocks, nothing new is stored.
  PrefixHit hit = kv.get_computed_blocks(prompt);
  EXPECT_EQ(hit.num_tokens, 8);
  ASSERT_TRUE(kv.allocate_slots(RequestId{2}, 10, &hit));
  EXPECT_EQ(kv.cache_full_blocks(RequestId{2}, prompt, 10, {}, 10), 0);
  // Without the hit (a request computing the same prefix itself), its blocks' hashes are
  // held by request 1's blocks: computed, but not stored.
  ASSERT_TRUE(kv.allocate_slots(RequestId{3}, 10));
  EXPECT_EQ(kv.cache_full_blocks(RequestId{3}, prompt, 10, {}, 10), 0);
  kv.end_step();
  kv.check_invariants();
}

}  // namespace
}  // namespace keel
