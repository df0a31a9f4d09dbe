// The paged KV pool of a drafting head on the device (the EAGLE-3 head,
// cuda_eagle3_head.h; the MTP layer, cuda_mtp_layer.h): the pool's blocks are allocated
// once when the head opens; each request's cache (MtpCache::device) holds a block list in
// position order and gives its blocks back when destroyed, so no step allocates device
// memory.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "exec/mtp_step.h"

namespace keel::cuda {

// The pool's free blocks, shared with the caches that hold the others (a cache may
// outlive its head: the drafter's per-request state is destroyed after its head).
struct HeadBlockPool {
  std::int32_t num_blocks = 0;  // in all
  std::int64_t block_bytes = 0;
  std::vector<std::int32_t> free;
  explicit HeadBlockPool(std::int32_t blocks, std::int64_t bytes);
};

// One request's blocks of a head's pool, in position order (MtpCache::device).
class HeadCache final : public MtpDeviceCache {
 public:
  explicit HeadCache(std::shared_ptr<HeadBlockPool> pool) : pool_(std::move(pool)) {}
  ~HeadCache() override;
  std::int64_t bytes() const override {
    return static_cast<std::int64_t>(blocks.size()) * pool_->block_bytes;
  }
  std::vector<std::int32_t> blocks;

 private:
  std::shared_ptr<HeadBlockPool> pool_;
};

// The blocks of `cache` in `pool` covering positions [0, end) (`block_size` a block, at
// most `max_blocks`): made on first use, grown from the free list. Throws
// Error(kResourceExhausted) naming `head` before taking any block when they do not fit,
// Error(kInternal) when `cache` belongs to another head.
const std::vector<std::int32_t> &head_blocks(MtpCache &cache,
                                             const std::shared_ptr<HeadBlockPool> &pool,
                                             std::int64_t end, std::int32_t block_size,
                                             std::int64_t max_blocks, const char *head);

}  // namespace keel::cuda
