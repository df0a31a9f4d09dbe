// A bounded, thread-safe cache of pre-token -> ids for the BPE model. Real text
// repeats its words, so most pre-tokens skip the merge loop. It is direct-mapped
// (a colliding word simply replaces the old entry), so a lookup allocates nothing
// and the memory is fixed; sharded locks keep concurrent encoders from contending.
#pragma once

#include <xxhash.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/ids.h"

namespace keel::text {

class WordCache {
 public:
  static constexpr std::size_t kMaxWordBytes = 30;  // longer words are not cached
  static constexpr std::size_t kMaxIds = 7;         // nor words of more tokens

  WordCache() : entries_(std::make_unique<Entry[]>(kEntries)) {}

  static std::uint64_t hash(std::string_view word) { return XXH3_64bits(word.data(), word.size()); }

  bool lookup(std::string_view word, std::uint64_t h, std::vector<TokenId> &out) const {
    if (word.size() > kMaxWordBytes) return false;
    const std::size_t slot = h & (kEntries - 1);
    std::lock_guard lock(locks_[slot % kLocks]);
    const Entry &e = entries_[slot];
    if (e.hash != h || e.len != word.size() || std::memcmp(e.word, word.data(), word.size()) != 0)
      return false;
    out.insert(out.end(), e.ids, e.ids + e.n);
    return true;
  }

  void store(std::string_view word, std::uint64_t h, const TokenId *ids, std::size_t n) const {
    if (word.size() > kMaxWordBytes || n > kMaxIds) return;
    const std::size_t slot = h & (kEntries - 1);
    std::lock_guard lock(locks_[slot % kLocks]);
    Entry &e = entries_[slot];
    e.hash = h;
    e.len = static_cast<std::uint8_t>(word.size());
    e.n = static_cast<std::uint8_t>(n);
    std::memcpy(e.word, word.data(), word.size());
    std::memcpy(e.ids, ids, n * sizeof(TokenId));
  }

 private:
  static constexpr std::size_t kEntries = 1 << 16;  // x 64 bytes = 4 MiB per model
  static constexpr std::size_t kLocks = 64;
  struct Entry {
    std::uint64_t hash = 0;
    std::uint8_t len = 0xFF;  // no word has this length: empty
    std::uint8_t n = 0;
    char word[kMaxWordBytes];
    TokenId ids[kMaxIds];
  };
  std::unique_ptr<Entry[]> entries_;
  mutable std::array<std::mutex, kLocks> locks_;
};

}  // namespace keel::text
