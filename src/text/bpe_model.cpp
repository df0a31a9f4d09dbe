#include "text/bpe_model.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <queue>

#include "text/utf8.h"

namespace keel::text {

BpeModel::BpeModel(std::vector<std::string> symbols, const std::vector<BpeMerge> &merges,
                   BpeOptions options)
    : opt_(options) {
  byte_token_.fill(-1);
  fallback_token_.fill(-1);
  by_symbol_.reserve(symbols.size());
  for (std::size_t id = 0; id < symbols.size(); ++id) {
    const std::string &s = symbols[id];
    if (s.empty()) continue;
    by_symbol_.emplace(s, static_cast<TokenId>(id));  // first id wins on duplicates
    if (opt_.byte_level && s.size() == 1) {
      auto &slot = byte_token_[static_cast<unsigned char>(s[0])];
      if (slot < 0) slot = static_cast<TokenId>(id);
    }
    if (!opt_.byte_level && s.size() == 6 && s.starts_with("<0x") && s.back() == '>') {
      unsigned v = 0;
      if (std::sscanf(s.c_str() + 3, "%2X", &v) == 1 && v < 256) {
        auto &slot = fallback_token_[v];
        if (slot < 0) slot = static_cast<TokenId>(id);
      }
    }
  }
  merges_.reserve(merges.size());
  for (const BpeMerge &m : merges) merges_.insert(m.left, m.right, Merge{m.rank, m.result});
}

std::optional<TokenId> BpeModel::find(std::string_view symbol) const {
  auto it = by_symbol_.find(symbol);
  if (it == by_symbol_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<TokenId> &syms) const {
  if (opt_.byte_level) {
    for (char c : word) {
      TokenId t = byte_token_[static_cast<unsigned char>(c)];
      if (t >= 0) {
        syms.push_back(t);
      } else if (opt_.unk) {
        syms.push_back(*opt_.unk);
      }
    }
    return;
  }
  std::size_t i = 0;
  bool prev_unk = false;
  while (i < word.size()) {
    std::size_t len = std::min(utf8_seq_len(static_cast<unsigned char>(word[i])), word.size() - i);
    std::string_view ch = word.substr(i, len);
    i += len;
    if (auto it = by_symbol_.find(ch); it != by_symbol_.end()) {
      syms.push_back(it->second);
      prev_unk = false;
      continue;
    }
    if (opt_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && fallback_token_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : ch) syms.push_back(fallback_token_[static_cast<unsigned char>(c)]);
        prev_unk = false;
        continue;
      }
    }
    if (opt_.unk) {
      if (!(opt_.fuse_unk && prev_unk)) syms.push_back(*opt_.unk);
      prev_unk = true;
    }
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<TokenId> &out) const {
  if (word.empty()) return;
  if (opt_.ignore_merges) {
    if (auto it = by_symbol_.find(word); it != by_symbol_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  const std::uint64_t h = cacheable ? WordCache::hash(word) : 0;
  if (cacheable && cache_.lookup(word, h, out)) return;
  // Merge in place at the end of `out`: no allocation per word.
  const std::size_t mark = out.size();
  initial_symbols(word, out);
  std::span<TokenId> syms(out.data() + mark, out.size() - mark);
  const std::size_t n = merge(syms);
  out.resize(mark + n);
  if (cacheable) cache_.store(word, h, out.data() + mark, n);
}

std::size_t BpeModel::merge(std::span<TokenId> syms) const {
  if (syms.size() < 2 || merges_.size() == 0) return syms.size();
  // Rescanning is fastest for short words; long ones (runs of CJK or spaces, or
  // hostile input) need the O(n log n) queue so that they cannot stall encoding.
  if (syms.size() <= kSmallWord) return merge_small(syms);
  return merge_heap(syms);
}

std::size_t BpeModel::merge_small(std::span<TokenId> syms) const {
  std::size_t n = syms.size();
  Merge pairs[kSmallWord];  // pairs[i]: the merge of syms[i], syms[i + 1]
  for (std::size_t i = 0; i + 1 < n; ++i) pairs[i] = merges_.find(syms[i], syms[i + 1]);
  while (n > 1) {
    std::int32_t best = INT_MAX;
    std::size_t bi = n;
    for (std::size_t i = 0; i + 1 < n; ++i) {
      if (pairs[i].rank >= 0 && pairs[i].rank < best) {
        best = pairs[i].rank;
        bi = i;
      }
    }
    if (bi == n) break;
    syms[bi] = pairs[bi].result;
    for (std::size_t j = bi + 1; j + 1 < n; ++j) {
      syms[j] = syms[j + 1];
      pairs[j] = pairs[j + 1];
    }
    --n;
    if (bi > 0) pairs[bi - 1] = merges_.find(syms[bi - 1], syms[bi]);
    if (bi + 1 < n) pairs[bi] = merges_.find(syms[bi], syms[bi + 1]);
  }
  return n;
}

std::size_t BpeModel::merge_heap(std::span<TokenId> syms) const {
  const int n = static_cast<int>(syms.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    std::int32_t rank;
    int pos;
    TokenId left, right, result;
    bool operator>(const Cand &o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> queue;
  auto push = [&](int i) {
    if (i < 0 || next[i] < 0) return;
    Merge m = merges_.find(syms[i], syms[next[i]]);
    if (m.rank >= 0) queue.push({m.rank, i, syms[i], syms[next[i]], m.result});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  std::vector<char> alive(n, 1);
  while (!queue.empty()) {
    Cand c = queue.top();
    queue.pop();
    const int i = c.pos;
    if (!alive[i] || syms[i] != c.left) continue;
    const int j = next[i];
    if (j < 0 || syms[j] != c.right) continue;
    syms[i] = c.result;
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  std::size_t w = 0;
  for (int i = 0; i >= 0 && i < n; i = next[i]) syms[w++] = syms[i];
  return w;
}

}  // namespace keel::text
