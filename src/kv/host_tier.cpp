#include "kv/host_tier.h"

#include <algorithm>

#include "core/error.h"

namespace keel {

HostTier::HostTier(std::int64_t capacity_bytes, std::size_t block_bytes, Allocator allocate)
    : block_bytes_(block_bytes), allocate_(std::move(allocate)) {
  if (block_bytes == 0) throw Error(ErrorCode::kInvalidArgument, "host tier: block_bytes is 0");
  capacity_ = static_cast<std::int32_t>(std::clamp<std::int64_t>(
      capacity_bytes / static_cast<std::int64_t>(block_bytes), 0, std::int64_t{1} << 30));
  constexpr std::size_t kChunkBytes = std::size_t{64} << 20;
  chunk_slots_ = static_cast<std::int32_t>(
      std::clamp<std::size_t>(kChunkBytes / block_bytes, 1, std::max(capacity_, 1)));
  chunks_.resize((capacity_ + chunk_slots_ - 1) / chunk_slots_);
  slots_.resize(capacity_);
  for (std::int32_t s = 0; s < capacity_; ++s) free_.insert(free_.end(), s);
}

std::int64_t HostTier::allocated_bytes() const {
  std::int64_t n = 0;
  for (std::size_t c = 0; c < chunks_.size(); ++c)
    if (chunks_[c])
      n += static_cast<std::int64_t>(std::min<std::int32_t>(
               chunk_slots_, capacity_ - static_cast<std::int32_t>(c) * chunk_slots_)) *
           static_cast<std::int64_t>(block_bytes_);
  return n;
}

void HostTier::reserve(std::int32_t slots) {
  slots = std::min(slots, capacity_);
  for (std::int32_t c = 0; c * chunk_slots_ < slots; ++c)
    if (!chunks_[c]) {
      const std::int32_t n = std::min(chunk_slots_, capacity_ - c * chunk_slots_);
      chunks_[c] = allocate_(static_cast<std::size_t>(n) * block_bytes_);
    }
}

std::int32_t HostTier::find_ready(const BlockHash &hash) const {
  auto it = index_.find(hash);
  if (it == index_.end() || slots_[it->second].state != State::kReady) return -1;
  return it->second;
}

std::int32_t HostTier::insert(const BlockHash &hash) {
  if (capacity_ == 0 || index_.count(hash)) return -1;
  if (free_.empty()) {
    // Evict the least recently used entry that nothing reads now.
    auto victim =
        std::find_if(lru_.begin(), lru_.end(), [&](std::int32_t s) { return slots_[s].pins == 0; });
    if (victim == lru_.end()) return -1;
    const std::int32_t v = *victim;
    index_.erase(slots_[v].hash);
    lru_.erase(victim);
    --num_ready_;
    release(v);
  }
  const std::int32_t s = *free_.begin();
  free_.erase(free_.begin());
  const std::int32_t c = s / chunk_slots_;
  if (!chunks_[c]) {
    const std::int32_t n = std::min(chunk_slots_, capacity_ - c * chunk_slots_);
    chunks_[c] = allocate_(static_cast<std::size_t>(n) * block_bytes_);
  }
  Slot &slot = slots_[s];
  slot.state = State::kFilling;
  slot.pins = 1;
  slot.hash = hash;
  index_.emplace(hash, s);
  return s;
}

void HostTier::mark_ready(std::int32_t s) {
  Slot &slot = slots_[s];
  KEEL_CHECK(slot.state == State::kFilling);
  slot.state = State::kReady;
  slot.lru = lru_.insert(lru_.end(), s);
  ++num_ready_;
}

void HostTier::pin(std::int32_t s) {
  KEEL_CHECK(slots_[s].state != State::kFree);
  ++slots_[s].pins;
}

void HostTier::unpin(std::int32_t s) {
  Slot &slot = slots_[s];
  KEEL_CHECK(slot.pins > 0);
  if (--slot.pins == 0 && slot.state == State::kDropped) release(s);
}

void HostTier::drop(std::int32_t s) {
  Slot &slot = slots_[s];
  if (slot.state == State::kFree || slot.state == State::kDropped) return;
  index_.erase(slot.hash);
  if (slot.state == State::kReady) {
    lru_.erase(slot.lru);
    --num_ready_;
  }
  slot.state = State::kDropped;
  if (slot.pins == 0) release(s);
}

void HostTier::touch(std::int32_t s) {
  Slot &slot = slots_[s];
  if (slot.state == State::kReady) lru_.splice(lru_.end(), lru_, slot.lru);
}

void HostTier::clear() {
  std::vector<std::int32_t> all;
  all.reserve(index_.size());
  for (const auto &[h, s] : index_) all.push_back(s);
  for (std::int32_t s : all) drop(s);
}

std::byte *HostTier::data(std::int32_t s) {
  return chunks_[s / chunk_slots_].get() +
         static_cast<std::size_t>(s % chunk_slots_) * block_bytes_;
}

void HostTier::release(std::int32_t s) {
  Slot &slot = slots_[s];
  slot.state = State::kFree;
  slot.pins = 0;
  free_.insert(s);
}

void HostTier::check_invariants() const {
  std::int32_t ready = 0, used = 0;
  for (std::int32_t s = 0; s < capacity_; ++s) {
    const Slot &slot = slots_[s];
    KEEL_CHECK(slot.pins >= 0);
    KEEL_CHECK((slot.state == State::kFree) == (free_.count(s) != 0));
    if (slot.state == State::kReady) ++ready;
    if (slot.state == State::kReady || slot.state == State::kFilling) {
      ++used;
      auto it = index_.find(slot.hash);
      KEEL_CHECK(it != index_.end() && it->second == s);
    }
    if (slot.state == State::kDropped) KEEL_CHECK(slot.pins > 0);
  }
  KEEL_CHECK(ready == num_ready_ && ready == static_cast<std::int32_t>(lru_.size()));
  KEEL_CHECK(used == static_cast<std::int32_t>(index_.size()));
}

}  // namespace keel
