#include "text/unigram_model.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "text/utf8.h"

namespace keel::text {

UnigramModel::UnigramModel(std::vector<std::string> pieces, std::vector<float> scores,
                           std::optional<TokenId> unk, bool byte_fallback)
    : scores_(std::move(scores)), unk_(unk), byte_fallback_(byte_fallback) {
  byte_token_.fill(-1);
  scores_.resize(pieces.size(), 0.0f);
  float min_score = 0.0f;
  for (std::size_t id = 0; id < pieces.size(); ++id) {
    const std::string &p = pieces[id];
    if (p.empty()) continue;
    by_piece_.emplace(p, static_cast<TokenId>(id));
    max_piece_bytes_ = std::max(max_piece_bytes_, p.size());
    min_score = std::min(min_score, scores_[id]);
    unsigned v;
    if (p.size() == 6 && p.starts_with("<0x") && p.back() == '>' &&
        std::sscanf(p.c_str() + 3, "%2X", &v) == 1 && v < 256 && byte_token_[v] < 0)
      byte_token_[v] = static_cast<TokenId>(id);
  }
  unk_score_ = min_score - 10.0f;  // SentencePiece's unknown-piece penalty
}

void UnigramModel::encode_word(std::string_view word, std::vector<TokenId> &out) const {
  const std::size_t n = word.size();
  if (n == 0) return;
  constexpr float kNone = -std::numeric_limits<float>::infinity();
  struct Node {
    float score = kNone;
    std::size_t from = 0;
    TokenId id = -1;  // -1: unknown character
  };
  std::vector<Node> best(n + 1);
  best[0].score = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (best[i].score == kNone) continue;
    const std::size_t clen = std::min(utf8_seq_len(static_cast<unsigned char>(word[i])), n - i);
    bool single = false;
    for (std::size_t len = clen; len <= max_piece_bytes_ && i + len <= n; ++len) {
      auto it = by_piece_.find(word.substr(i, len));
      if (it == by_piece_.end()) continue;
      if (len == clen) single = true;
      const float s = best[i].score + scores_[it->second];
      if (s > best[i + len].score) best[i + len] = {s, i, it->second};
    }
    if (!single) {
      const float s = best[i].score + unk_score_;
      if (s > best[i + clen].score) best[i + clen] = {s, i, -1};
    }
  }
  std::vector<std::pair<std::size_t, Node>> path;  // (start, node) from the end
  for (std::size_t e = n; e > 0;) {
    path.push_back({best[e].from, best[e]});
    path.back().second.from = e;  // reuse: end offset
    e = best[e].from;
  }
  std::reverse(path.begin(), path.end());
  bool prev_unk = false;
  for (auto &[start, node] : path) {
    if (node.id >= 0) {
      out.push_back(node.id);
      prev_unk = false;
      continue;
    }
    const std::string_view ch = word.substr(start, node.from - start);
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_token_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : ch) out.push_back(byte_token_[static_cast<unsigned char>(c)]);
        prev_unk = false;
        continue;
      }
    }
    if (unk_ && !prev_unk) out.push_back(*unk_);
    prev_unk = true;
  }
}

}  // namespace keel::text
