// An open-addressing hash map from a pair of token ids to a merge (rank, result):
// the BPE hot path does one lookup per adjacent pair, so it avoids std::unordered_map's
// node chasing.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ids.h"

namespace keel::text {

struct Merge {
  std::int32_t rank = -1;  // lower merges first; -1: no merge
  TokenId result = -1;
};

class FlatPairMap {
 public:
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    size_ = 0;
  }

  // Keeps the first (lowest-rank) entry when a pair repeats, as HF does.
  void insert(TokenId a, TokenId b, Merge m) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    const std::uint64_t k = key(a, b);
    for (std::size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty) {
        slots_[i] = {k, m};
        ++size_;
        return;
      }
      if (slots_[i].key == k) {
        if (m.rank < slots_[i].merge.rank) slots_[i].merge = m;
        return;
      }
    }
  }

  Merge find(TokenId a, TokenId b) const {
    if (slots_.empty()) return {};
    const std::uint64_t k = key(a, b);
    for (std::size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
      const Slot &s = slots_[i];
      if (s.key == k) return s.merge;
      if (s.key == kEmpty) return {};
    }
  }

  std::size_t size() const { return size_; }

 private:
  static constexpr std::uint64_t kEmpty = ~0ull;
  struct Slot {
    std::uint64_t key = kEmpty;
    Merge merge;
  };
  static std::uint64_t key(TokenId a, TokenId b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
           static_cast<std::uint32_t>(b);
  }
  static std::size_t hash(std::uint64_t k) {
    k ^= k >> 29;
    k *= 0xbf58476d1ce4e5b9ull;
    k ^= k >> 32;
    return static_cast<std::size_t>(k);
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reserve(old.empty() ? 8 : old.size());
    for (const Slot &s : old)
      if (s.key != kEmpty)
        insert(static_cast<TokenId>(s.key >> 32), static_cast<TokenId>(s.key), s.merge);
  }

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

}  // namespace keel::text
