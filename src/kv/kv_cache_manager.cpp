#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace keel {

KvCacheManager::KvCacheManager(const KvCacheConfig &config)
    : config_(config), pool_(config.num_blocks) {
  if (config.block_size <= 0)
    throw Error(ErrorCode::kInvalidArgument,
                "kv_cache: block_size must be positive, got " + std::to_string(config.block_size));
}

PrefixHit KvCacheManager::get_computed_blocks(std::span<const TokenId> tokens,
                                              std::string_view extra_keys) {
  PrefixHit hit;
  if (!config_.enable_prefix_caching) return hit;
  const std::int32_t bs = config_.block_size;
  const auto n = static_cast<std::int32_t>(tokens.size());
  for (std::int32_t i = 0; (i + 1) * bs <= n; ++i) {
    const BlockHash h =
        hash_block(config_.model, i == 0 ? nullptr : &hit.hashes.back(),
                   tokens.subspan(static_cast<std::size_t>(i) * bs, bs), extra_keys);
    auto block = pool_.find(h);
    if (!block) break;
    hit.blocks.push_back(*block);
    hit.hashes.push_back(h);
  }
  hit.num_tokens = static_cast<std::int32_t>(hit.blocks.size()) * bs;
  if (n > 0 && hit.num_tokens == n) {  // the last token must be computed for its logits
    hit.num_tokens = n - 1;
    hit.copy_last = true;
  }
  hit.query_tokens = n;
  return hit;
}

std::vector<BlockHash> KvCacheManager::lower_tier_chain(std::span<const TokenId> tokens,
                                                        const PrefixHit &hit,
                                                        std::string_view extra_keys,
                                                        const TierIndex &tiers,
                                                        std::int32_t max_blocks) const {
  std::vector<BlockHash> out;
  if (!config_.enable_prefix_caching || hit.copy_last) return out;
  const std::int32_t bs = config_.block_size;
  const auto n = static_cast<std::int32_t>(tokens.size());
  const BlockHash *parent = hit.hashes.empty() ? nullptr : &hit.hashes.back();
  for (auto i = static_cast<std::int32_t>(hit.blocks.size());
       (i + 1) * bs <= n && static_cast<std::int32_t>(out.size()) < max_blocks; ++i) {
    const BlockHash h = hash_block(
        config_.model, parent, tokens.subspan(static_cast<std::size_t>(i) * bs, bs), extra_keys);
    if (!tiers.contains(h)) break;
    out.push_back(h);
    parent = &out.back();
  }
  return out;
}

bool KvCacheManager::allocate_slots(RequestId id, std::int32_t num_tokens, const PrefixHit *hit,
                                    std::optional<BlockCopy> *copy) {
  auto it = requests_.find(id);
  const bool fresh = it == requests_.end();
  if (hit != nullptr && !fresh)
    throw Error(ErrorCode::kInternal, "kv_cache: prefix hit for a request that holds blocks");
  const std::int32_t held = fresh ? 0 : static_cast<std::int32_t>(it->second.blocks.size());
  const std::int32_t hit_blocks = hit ? static_cast<std::int32_t>(hit->blocks.size()) : 0;
  const std::int32_t shared = hit && hit->copy_last ? hit_blocks - 1 : hit_blocks;
  const std::int32_t needed = blocks_for(num_tokens);
  const std::int32_t new_blocks = std::max(0, needed - held - shared);
  // Cached blocks that sit on the free list stop being free once taken.
  std::int32_t free_hits = 0;
  for (std::int32_t i = 0; i < hit_blocks; ++i)
    free_hits += pool_.ref_count(hit->blocks[i]) == 0 ? 1 : 0;
  if (new_blocks > pool_.num_free() - free_hits) return false;

  RequestBlocks &rb = fresh ? requests_[id] : it->second;
  if (hit != nullptr) {
    ++stats_.queries;
    stats_.query_tokens += hit->query_tokens;
    stats_.hit_tokens += hit->num_tokens;
    for (std::int32_t i = 0; i < shared; ++i) {
      pool_.touch(hit->blocks[i]);
      rb.blocks.push_back(hit->blocks[i]);
      rb.hashes.push_back(hit->hashes[i]);
    }
    if (hit->copy_last) {
      const BlockId src = hit->blocks.back();
      pool_.touch(src);  // pinned so that nothing reuses it before the copy runs
      pinned_.push_back(src);
      const BlockId dst = *pool_.allocate();
      rb.blocks.push_back(dst);
      if (copy == nullptr)
        throw Error(ErrorCode::kInternal, "kv_cache: full hit without a copy slot");
      *copy = BlockCopy{src, dst};
    }
  }
  while (static_cast<std::int32_t>(rb.blocks.size()) < needed)
    rb.blocks.push_back(*pool_.allocate());
  return true;
}

std::int32_t KvCacheManager::cache_full_blocks(RequestId id, std::span<const TokenId> tokens,
                                               std::int32_t num_computed,
                                               std::string_view extra_keys,
                                               std::int32_t count_within) {
  if (!config_.enable_prefix_caching) return 0;
  auto it = requests_.find(id);
  if (it == requests_.end()) return 0;
  std::int32_t stored = 0;
  RequestBlocks &rb = it->second;
  const std::int32_t bs = config_.block_size;
  const auto full =
      std::min<std::int32_t>(num_computed / bs, static_cast<std::int32_t>(rb.blocks.size()));
  if (static_cast<std::size_t>(full) * bs > tokens.size())
    throw Error(ErrorCode::kInternal, "kv_cache: computed tokens beyond the sequence");
  for (auto i = static_cast<std::int32_t>(rb.hashes.size()); i < full; ++i) {
    const BlockHash h =
        hash_block(config_.model, i == 0 ? nullptr : &rb.hashes.back(),
                   tokens.subspan(static_cast<std::size_t>(i) * bs, bs), extra_keys);
    rb.hashes.push_back(h);
    if (pool_.hash_of(rb.blocks[i]) == nullptr && pool_.register_hash(rb.blocks[i], h) &&
        (i + 1) * bs <= count_within)
      stored += bs;
  }
  return stored;
}

void KvCacheManager::free(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  const auto &blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) pool_.release(*b);
  requests_.erase(it);
}

std::int32_t KvCacheManager::truncate(RequestId id, std::int32_t num_tokens) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return 0;
  RequestBlocks &rb = it->second;
  const std::int32_t keep = blocks_for(std::max(num_tokens, 0));
  if (static_cast<std::int32_t>(rb.hashes.size()) > keep)
    throw Error(ErrorCode::kInternal, "kv_cache: truncate past a cached block");
  std::int32_t freed = 0;
  while (static_cast<std::int32_t>(rb.blocks.size()) > keep) {
    pool_.release(rb.blocks.back());
    rb.blocks.pop_back();
    ++freed;
  }
  return freed;
}

void KvCacheManager::end_step() {
  for (BlockId b : pinned_) pool_.release(b);
  pinned_.clear();
}

std::span<const BlockId> KvCacheManager::blocks(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return {};
  return it->second.blocks;
}

bool KvCacheManager::writable(BlockId block) const {
  return pool_.ref_count(block) == 1 && pool_.hash_of(block) == nullptr;
}

void KvCacheManager::check_invariants() const {
  pool_.check_invariants();
  std::unordered_map<std::int32_t, std::int32_t> refs;
  for (const auto &[id, rb] : requests_) {
    KEEL_CHECK(rb.hashes.size() <= rb.blocks.size());
    for (BlockId b : rb.blocks) ++refs[b.value];
  }
  for (BlockId b : pinned_) ++refs[b.value];
  for (std::int32_t b = 0; b < pool_.num_blocks(); ++b) {
    auto it = refs.find(b);
    KEEL_CHECK(pool_.ref_count(BlockId{b}) == (it == refs.end() ? 0 : it->second));
  }
}

}  // namespace keel
