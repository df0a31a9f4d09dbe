// The host-RAM tier: a size-capped set of block images keyed by block hash, with LRU
// eviction. Memory comes from the KV store's allocator (pinned on CUDA) in chunks of
// about 64 MiB, taken on first use, so a large cap costs nothing until it fills.
//
// Slots are handed out lowest-free-first, so the blocks of one offload or restore
// mostly land in consecutive slots and move in one transfer (adjacent()).
//
// An entry is filling (a save or an SSD read is writing it), then ready. Pinned entries
// (being read by a transfer or an SSD write) are never evicted or reused; dropping a
// pinned entry frees its slot when the last pin goes. Engine thread only; the I/O
// workers touch slot memory only while the engine holds a pin for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <set>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace keel {

class HostTier {
 public:
  using Allocator = std::function<std::shared_ptr<std::byte[]>(std::size_t)>;
  HostTier(std::int64_t capacity_bytes, std::size_t block_bytes, Allocator allocate);

  std::int32_t capacity() const { return capacity_; }  // slots
  std::size_t block_bytes() const { return block_bytes_; }
  std::int32_t num_entries() const { return static_cast<std::int32_t>(index_.size()); }
  std::int32_t num_ready() const { return num_ready_; }
  std::int64_t allocated_bytes() const;

  // Takes the memory of the first `slots` slots now (at start, rather than inside the
  // first restore: the staging room for SSD reads).
  void reserve(std::int32_t slots);

  // The ready slot holding `hash`, or -1.
  std::int32_t find_ready(const BlockHash &hash) const;
  bool has(const BlockHash &hash) const { return index_.count(hash) != 0; }
  // A new filling entry for `hash`, pinned once; evicts the least recently used
  // unpinned ready entry when full. -1 when `hash` is present or every slot is pinned.
  std::int32_t insert(const BlockHash &hash);
  void mark_ready(std::int32_t slot);  // becomes the most recently used
  void pin(std::int32_t slot);
  void unpin(std::int32_t slot);
  // Forgets the entry (a failed fill, a clear); the slot is freed once unpinned.
  void drop(std::int32_t slot);
  void touch(std::int32_t slot);  // most recently used
  void clear();                   // drops every entry

  std::byte *data(std::int32_t slot);  // [block_bytes]
  const BlockHash &hash_of(std::int32_t slot) const { return slots_[slot].hash; }
  bool is_ready(std::int32_t slot) const { return slots_[slot].state == State::kReady; }
  bool is_filling(std::int32_t slot) const { return slots_[slot].state == State::kFilling; }
  // Whether slot b's image directly follows slot a's in memory.
  bool adjacent(std::int32_t a, std::int32_t b) const {
    return b == a + 1 && a / chunk_slots_ == b / chunk_slots_;
  }

  void check_invariants() const;

 private:
  enum class State : std::uint8_t { kFree, kFilling, kReady, kDropped };
  struct Slot {
    State state = State::kFree;
    std::int32_t pins = 0;
    BlockHash hash;
    std::list<std::int32_t>::iterator lru;  // valid when ready
  };
  void release(std::int32_t slot);  // back to the free set

  std::size_t block_bytes_;
  std::int32_t capacity_ = 0, chunk_slots_ = 1, num_ready_ = 0;
  Allocator allocate_;
  std::vector<std::shared_ptr<std::byte[]>> chunks_;   // [capacity / chunk_slots], lazily
  std::vector<Slot> slots_;                            // [capacity]
  std::set<std::int32_t> free_;                        // lowest first
  std::list<std::int32_t> lru_;                        // ready slots, front: least recent
  std::unordered_map<BlockHash, std::int32_t> index_;  // filling and ready entries
};

}  // namespace keel
