#include "kv/block_pool.h"

#include <string>

#include "core/error.h"

namespace keel {

BlockPool::BlockPool(std::int32_t num_blocks) : num_blocks_(num_blocks) {
  if (num_blocks <= 0)
    throw Error(ErrorCode::kInvalidArgument,
                "block_pool: num_blocks must be positive, got " + std::to_string(num_blocks));
  prev_.resize(num_blocks + 1);
  next_.resize(num_blocks + 1);
  refs_.assign(num_blocks, 0);
  hashes_.resize(num_blocks);
  has_hash_.assign(num_blocks, 0);
  index_.reserve(num_blocks);
  const std::int32_t s = num_blocks_;
  prev_[s] = next_[s] = s;
  for (std::int32_t b = 0; b < num_blocks; ++b) push_back(b);
}

std::int32_t BlockPool::checked(BlockId block) const {
  if (block.value < 0 || block.value >= num_blocks_)
    throw Error(ErrorCode::kInternal,
                "block_pool: block id " + std::to_string(block.value) + " out of range");
  return block.value;
}

void BlockPool::unlink(std::int32_t b) {
  next_[prev_[b]] = next_[b];
  prev_[next_[b]] = prev_[b];
  prev_[b] = next_[b] = -1;
  --num_free_;
}

void BlockPool::push_back(std::int32_t b) {
  const std::int32_t s = num_blocks_;
  const std::int32_t tail = prev_[s];
  prev_[b] = tail;
  next_[b] = s;
  next_[tail] = b;
  prev_[s] = b;
  ++num_free_;
}

std::optional<BlockId> BlockPool::allocate() {
  const std::int32_t b = next_[num_blocks_];
  if (b == num_blocks_) return std::nullopt;
  unlink(b);
  if (record_evictions_ && has_hash_[b]) evicted_.push_back(EvictedBlock{BlockId{b}, hashes_[b]});
  evict(BlockId{b});
  refs_[b] = 1;
  return BlockId{b};
}

bool BlockPool::allocate(std::int32_t n, std::vector<BlockId> &out) {
  if (n < 0 || n > num_free_) return false;
  for (std::int32_t i = 0; i < n; ++i) out.push_back(*allocate());
  return true;
}

void BlockPool::touch(BlockId block) {
  const std::int32_t b = checked(block);
  if (refs_[b] == 0) unlink(b);
  ++refs_[b];
}

void BlockPool::release(BlockId block) {
  const std::int32_t b = checked(block);
  if (refs_[b] <= 0)
    throw Error(ErrorCode::kInternal, "block_pool: double free of block " + std::to_string(b));
  if (--refs_[b] == 0) push_back(b);
}

std::int32_t BlockPool::ref_count(BlockId block) const { return refs_[checked(block)]; }

bool BlockPool::register_hash(BlockId block, const BlockHash &hash) {
  const std::int32_t b = checked(block);
  if (has_hash_[b])
    throw Error(ErrorCode::kInternal,
                "block_pool: block " + std::to_string(b) + " already has a hash");
  if (refs_[b] == 0)
    throw Error(ErrorCode::kInternal, "block_pool: hashing free block " + std::to_string(b));
  if (!index_.emplace(hash, b).second) return false;
  hashes_[b] = hash;
  has_hash_[b] = 1;
  return true;
}

std::optional<BlockId> BlockPool::find(const BlockHash &hash) const {
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  return BlockId{it->second};
}

const BlockHash *BlockPool::hash_of(BlockId block) const {
  const std::int32_t b = checked(block);
  return has_hash_[b] ? &hashes_[b] : nullptr;
}

bool BlockPool::evict(BlockId block) {
  const std::int32_t b = checked(block);
  if (!has_hash_[b]) return false;
  index_.erase(hashes_[b]);
  has_hash_[b] = 0;
  return true;
}

std::int32_t BlockPool::evict_all_free() {
  std::int32_t n = 0;
  for (std::int32_t b = next_[num_blocks_]; b != num_blocks_; b = next_[b])
    n += evict(BlockId{b}) ? 1 : 0;
  return n;
}

std::vector<EvictedBlock> BlockPool::cached_blocks() const {
  std::vector<EvictedBlock> v;
  v.reserve(index_.size());
  for (const auto &[h, b] : index_) v.push_back(EvictedBlock{BlockId{b}, h});
  return v;
}

void BlockPool::check_invariants() const {
  const std::int32_t s = num_blocks_;
  std::vector<std::uint8_t> on_list(num_blocks_, 0);
  std::int32_t count = 0;
  for (std::int32_t b = next_[s], prev = s; b != s; prev = b, b = next_[b]) {
    KEEL_CHECK(b >= 0 && b < num_blocks_);
    KEEL_CHECK(prev_[b] == prev);
    KEEL_CHECK(!on_list[b]);
    on_list[b] = 1;
    KEEL_CHECK(++count <= num_blocks_);
  }
  KEEL_CHECK(count == num_free_);
  std::int32_t hashed = 0;
  for (std::int32_t b = 0; b < num_blocks_; ++b) {
    KEEL_CHECK(refs_[b] >= 0);
    KEEL_CHECK((refs_[b] == 0) == (on_list[b] != 0));
    if (has_hash_[b]) {
      ++hashed;
      auto it = index_.find(hashes_[b]);
      KEEL_CHECK(it != index_.end() && it->second == b);
    }
  }
  KEEL_CHECK(hashed == static_cast<std::int32_t>(index_.size()));
}

}  // namespace keel
