#include "text/added_tokens.h"

#include <algorithm>

namespace keel::text {

namespace {
bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_word_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') ||
         u == '_';
}
}  // namespace

void AddedTokenMatcher::build(std::vector<AddedToken> tokens) {
  tokens_.clear();
  for (auto &t : tokens)
    if (!t.content.empty()) tokens_.push_back(std::move(t));
  for (auto &v : by_first_) v.clear();
  for (std::uint32_t i = 0; i < tokens_.size(); ++i)
    by_first_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
  for (auto &v : by_first_)
    std::stable_sort(v.begin(), v.end(), [&](std::uint32_t a, std::uint32_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
}

void AddedTokenMatcher::split(std::string_view text, bool allow_special,
                              std::vector<TextSegment> &out) const {
  std::size_t seg_start = 0;  // start of the pending plain-text segment
  std::size_t i = 0;
  while (i < text.size()) {
    const auto &cands = by_first_[static_cast<unsigned char>(text[i])];
    const AddedToken *hit = nullptr;
    for (std::uint32_t k : cands) {
      const AddedToken &t = tokens_[k];
      if (t.special && !allow_special) continue;
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      if (t.single_word) {
        const std::size_t e = i + t.content.size();
        if ((i > 0 && is_word_char(text[i - 1])) || (e < text.size() && is_word_char(text[e])))
          continue;
      }
      hit = &t;
      break;
    }
    if (!hit) {
      ++i;
      continue;
    }
    std::size_t b = i, e = i + hit->content.size();
    if (hit->lstrip)
      while (b > seg_start && is_space(text[b - 1])) --b;
    if (hit->rstrip)
      while (e < text.size() && is_space(text[e])) ++e;
    if (b > seg_start) out.push_back({text.substr(seg_start, b - seg_start), seg_start, -1});
    out.push_back({{}, b, hit->id});
    seg_start = e;
    i = e;
  }
  if (seg_start < text.size()) out.push_back({text.substr(seg_start), seg_start, -1});
}

}  // namespace keel::text
