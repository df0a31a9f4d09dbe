// Which KV blocks each request holds, and which full blocks are cached for reuse.
//
// A request's blocks, for a prompt of 40 tokens, block size 16, 16 cached:
//
//   | block 0 (cache hit) | block 1 (new)        | block 2 (new)     |
//   |<- computed (hit) -->|<---- computed this step or later ----->|
//
// The scheduler asks get_computed_blocks() before admitting a request, then
// allocate_slots() for the tokens it schedules; after the step computed them,
// cache_full_blocks() makes newly full blocks findable. Only full blocks are ever
// shared, and a full block is never written again, so a shared block is never written.
// The one exception is an exact full hit: the last prompt token must still be computed
// to produce logits, and it lives in the last cached block, so that block is copied into
// a fresh one (a BlockCopy the engine runs before the forward) and the copy is written.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"
#include "kv/tier_index.h"

namespace keel {

struct KvCacheConfig {
  std::int32_t num_blocks = 0;
  std::int32_t block_size = 16;
  bool enable_prefix_caching = true;
  ModelFingerprint model;
};

// The longest cached prefix of a request, found by get_computed_blocks() and taken by
// allocate_slots() in the same scheduling pass (nothing may allocate in between).
struct PrefixHit {
  std::vector<BlockId> blocks;    // cached blocks, in order
  std::vector<BlockHash> hashes;  // their chained hashes
  std::int32_t num_tokens = 0;    // tokens whose KV is reused; at most prompt - 1
  bool copy_last = false;         // exact full hit: the last block is copied, not shared
  std::int32_t query_tokens = 0;  // tokens looked up
};

struct BlockCopy {
  BlockId src, dst;
};

// Counted when a lookup's result is taken by allocate_slots (an admission), so a request
// that waits at the head of the queue for several steps counts once.
struct KvCacheStats {
  std::int64_t queries = 0;          // admissions that looked up the cache
  std::int64_t query_tokens = 0;     // tokens looked up
  std::int64_t hit_tokens = 0;       // tokens found cached on the device
  std::int64_t restored_tokens = 0;  // tokens restored from the tiers below
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig &config);

  std::int32_t block_size() const { return config_.block_size; }
  bool prefix_caching() const { return config_.enable_prefix_caching; }
  const BlockPool &pool() const { return pool_; }
  const KvCacheStats &stats() const { return stats_; }

  // Longest cached prefix of `tokens` (whole blocks), leaving at least the last token
  // to compute. Empty when caching is off or nothing matches.
  PrefixHit get_computed_blocks(std::span<const TokenId> tokens, std::string_view extra_keys = {});

  // Continues the chained lookup of `tokens` past the device hit into the tiers below:
  // the hashes of the following full blocks that `tiers` holds, in order, at most
  // `max_blocks`. Empty on an exact full device hit.
  std::vector<BlockHash> lower_tier_chain(std::span<const TokenId> tokens, const PrefixHit &hit,
                                          std::string_view extra_keys, const TierIndex &tiers,
                                          std::int32_t max_blocks) const;

  // Grows the request's blocks to cover `num_tokens` positions (tokens computed plus
  // those scheduled now). `hit` may be given only when the request holds no blocks yet;
  // its blocks are then shared first. On an exact full hit, *copy receives the block
  // copy to run before the forward. Returns false, changing nothing, when too few blocks
  // are free.
  bool allocate_slots(RequestId id, std::int32_t num_tokens, const PrefixHit *hit = nullptr,
                      std::optional<BlockCopy> *copy = nullptr);

  // Makes the request's blocks that are full within its first `num_computed` tokens
  // findable by their chained hash. `tokens` is the request's whole token sequence.
  // Returns the tokens of the blocks this call stored in the cache (new hashes, not
  // ones another block already holds) that lie wholly within the first `count_within`
  // tokens: a request's prompt tokens written to the cache (Anthropic's cache creation).
  std::int32_t cache_full_blocks(RequestId id, std::span<const TokenId> tokens,
                                 std::int32_t num_computed, std::string_view extra_keys = {},
                                 std::int32_t count_within = 0);

  // Speculative decoding's rollback: keeps the blocks covering the request's first
  // `num_tokens` positions and frees the rest (tail first). Freed blocks held only
  // rejected drafts' KV, past every computed full block, so none was ever hashed into
  // the prefix index (cache_full_blocks sees only accepted tokens). Throws
  // Error(kInternal) if a block to free is hashed. Returns how many were freed.
  std::int32_t truncate(RequestId id, std::int32_t num_tokens);

  // Releases all of the request's blocks (tail first, so a prefix's tail is evicted
  // before its head). A request that holds nothing is ignored.
  void free(RequestId id);
  // Ends a step: releases the source blocks of this step's copies, pinned until now.
  void end_step();

  // The view the scheduler gets of a request: its block ids, position p in blocks[p / bs].
  std::span<const BlockId> blocks(RequestId id) const;
  bool holds_blocks(RequestId id) const { return requests_.count(id) != 0; }
  // Whether the engine may write into `block`: held by one request and not cached.
  bool writable(BlockId block) const;

  std::int32_t num_free_blocks() const { return pool_.num_free(); }
  std::int32_t num_requests() const { return static_cast<std::int32_t>(requests_.size()); }
  // Forgets every cached block that no request holds; returns how many.
  std::int32_t evict_cached() { return pool_.evict_all_free(); }
  // Tier offload support (BlockPool::set_record_evictions / take_evicted / cached_blocks).
  void set_record_evictions(bool on) { pool_.set_record_evictions(on); }
  std::vector<EvictedBlock> take_evicted() { return pool_.take_evicted(); }
  std::vector<EvictedBlock> cached_blocks() const { return pool_.cached_blocks(); }
  void count_restored(std::int32_t tokens) { stats_.restored_tokens += tokens; }

  // Throws Error(kInternal) if the block counts disagree with the requests' views.
  void check_invariants() const;

 private:
  struct RequestBlocks {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;  // chained hashes of blocks[0 .. hashes.size())
  };

  std::int32_t blocks_for(std::int32_t tokens) const {
    return (tokens + config_.block_size - 1) / config_.block_size;
  }

  KvCacheConfig config_;
  BlockPool pool_;
  std::unordered_map<RequestId, RequestBlocks> requests_;
  std::vector<BlockId> pinned_;  // copy sources held until end_step()
  KvCacheStats stats_;
};

}  // namespace keel
