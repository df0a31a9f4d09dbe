// A fixed set of KV blocks addressed by index, with reference counts, an O(1) LRU list
// of free blocks, and the index from content hash to block. It knows nothing of models,
// devices or requests: integers in, integers out.
//
// A block whose count drops to zero keeps its contents and its hash: it stays findable
// (a later request can take it back with touch()) until allocate() reuses it, which
// removes its hash. allocate() takes the least recently freed block first.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/ids.h"
#include "kv/block_hash.h"

namespace keel {

// A cached block that allocate() is reusing: its old contents, named by `hash`, are
// still there until the caller writes the block.
struct EvictedBlock {
  BlockId block;
  BlockHash hash;
};

class BlockPool {
 public:
  explicit BlockPool(std::int32_t num_blocks);

  std::int32_t num_blocks() const { return num_blocks_; }
  std::int32_t num_free() const { return num_free_; }  // count zero, cached or not
  std::int32_t num_used() const { return num_blocks_ - num_free_; }
  std::int32_t num_cached() const { return static_cast<std::int32_t>(index_.size()); }

  // Takes the least recently freed block, forgets its hash, sets its count to one.
  // Returns nullopt when every block is in use.
  std::optional<BlockId> allocate();
  // Takes n blocks, or none when fewer than n are free.
  bool allocate(std::int32_t n, std::vector<BlockId> &out);
  // Adds a reference; a free block leaves the free list (a prefix-cache hit).
  void touch(BlockId block);
  // Drops a reference; at zero the block becomes the most recently freed. Throws
  // Error(kInternal) on a block that is already free (a double free).
  void release(BlockId block);
  std::int32_t ref_count(BlockId block) const;

  // Makes an in-use block findable by `hash`. Returns false (and changes nothing) when
  // the hash already names another block: identical contents computed twice; the first
  // stays the cached copy. Throws Error(kInternal) if the block already has a hash.
  bool register_hash(BlockId block, const BlockHash &hash);
  std::optional<BlockId> find(const BlockHash &hash) const;
  const BlockHash *hash_of(BlockId block) const;
  // Forgets a block's hash (its contents are no longer trusted). Returns whether it had one.
  bool evict(BlockId block);
  // Forgets the hashes of all free blocks (a cache reset); returns how many.
  std::int32_t evict_all_free();

  // When on, allocate() remembers every cached block it reuses (for the tiers below,
  // which save its contents before they are overwritten); take_evicted() hands them over.
  void set_record_evictions(bool on) { record_evictions_ = on; }
  std::vector<EvictedBlock> take_evicted() { return std::exchange(evicted_, {}); }
  // Every block that has a hash (held or free), in no particular order.
  std::vector<EvictedBlock> cached_blocks() const;

  // Walks every structure and throws Error(kInternal) on any inconsistency. O(blocks).
  void check_invariants() const;

 private:
  std::int32_t checked(BlockId block) const;
  void unlink(std::int32_t b);
  void push_back(std::int32_t b);

  std::int32_t num_blocks_;
  std::int32_t num_free_ = 0;
  // Doubly linked free list through arrays; index num_blocks_ is the sentinel, so
  // next_[sentinel] is the LRU head and prev_[sentinel] the MRU tail.
  std::vector<std::int32_t> prev_, next_;  // [num_blocks + 1]
  std::vector<std::int32_t> refs_;         // [num_blocks]
  std::vector<BlockHash> hashes_;          // [num_blocks], valid where has_hash_
  std::vector<std::uint8_t> has_hash_;     // [num_blocks]
  std::unordered_map<BlockHash, std::int32_t> index_;
  bool record_evictions_ = false;
  std::vector<EvictedBlock> evicted_;
};

}  // namespace keel
