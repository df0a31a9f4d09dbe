#include "exec/cuda/head_block_pool.h"

#include <string>

#include "core/error.h"

namespace keel::cuda {

HeadBlockPool::HeadBlockPool(std::int32_t blocks, std::int64_t bytes)
    : num_blocks(blocks), block_bytes(bytes) {
  for (std::int32_t b = blocks - 1; b >= 0; --b) free.push_back(b);
}

HeadCache::~HeadCache() { pool_->free.insert(pool_->free.end(), blocks.rbegin(), blocks.rend()); }

const std::vector<std::int32_t> &head_blocks(MtpCache &cache,
                                             const std::shared_ptr<HeadBlockPool> &pool,
                                             std::int64_t end, std::int32_t block_size,
                                             std::int64_t max_blocks, const char *head) {
  auto *held = dynamic_cast<HeadCache *>(cache.device.get());
  if (held == nullptr) {
    if (cache.device || !cache.rows.empty())
      throw Error(ErrorCode::kInternal, std::string(head) + ": the cache was made by another head");
    auto made = std::make_unique<HeadCache>(pool);
    held = made.get();
    cache.device = std::move(made);
  }
  const std::int64_t need = (end + block_size - 1) / block_size,
                     have = static_cast<std::int64_t>(held->blocks.size());
  if (need > max_blocks)
    throw Error(ErrorCode::kResourceExhausted,
                std::string(head) + ": positions past max_model_len");
  if (need - have > static_cast<std::int64_t>(pool->free.size()))
    throw Error(ErrorCode::kResourceExhausted, std::string(head) + ": its KV pool of " +
                                                   std::to_string(pool->num_blocks) +
                                                   " blocks is full");
  for (std::int64_t b = have; b < need; ++b) {
    held->blocks.push_back(pool->free.back());
    pool->free.pop_back();
  }
  return held->blocks;
}

}  // namespace keel::cuda
