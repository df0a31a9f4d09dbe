// A bounded, thread-safe cache of pre-token -> ids for the BPE model. Real text
// repeats its words, so most pre-tokens skip the merge loop. Sharded so that
// concurrent encoders rarely contend; a full shard is simply cleared.
#pragma once

#include <array>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/ids.h"

namespace keel::text {

class WordCache {
 public:
  static constexpr std::size_t kMaxWordBytes = 64;  // longer words are not cached

  bool lookup(std::string_view word, std::vector<TokenId> &out) const {
    const std::size_t h = std::hash<std::string_view>{}(word);
    Shard &s = shards_[h % kShards];
    std::lock_guard lock(s.mu);
    auto it = s.map.find(word);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void store(std::string_view word, const TokenId *ids, std::size_t n) const {
    if (word.size() > kMaxWordBytes) return;
    const std::size_t h = std::hash<std::string_view>{}(word);
    Shard &s = shards_[h % kShards];
    std::lock_guard lock(s.mu);
    if (s.map.size() >= kShardCapacity) s.map.clear();
    s.map.emplace(std::string(word), std::vector<TokenId>(ids, ids + n));
  }

 private:
  static constexpr std::size_t kShards = 16;
  static constexpr std::size_t kShardCapacity = 16384;
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<TokenId>, Hash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace keel::text
