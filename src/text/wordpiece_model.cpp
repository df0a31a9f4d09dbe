#include "text/wordpiece_model.h"

#include "text/utf8.h"

namespace keel::text {

WordPieceModel::WordPieceModel(std::vector<std::string> pieces, std::string prefix,
                               std::optional<TokenId> unk, std::size_t max_chars_per_word)
    : prefix_(std::move(prefix)), unk_(unk), max_chars_(max_chars_per_word) {
  for (std::size_t id = 0; id < pieces.size(); ++id)
    if (!pieces[id].empty()) by_piece_.emplace(pieces[id], static_cast<TokenId>(id));
}

void WordPieceModel::encode_word(std::string_view word, std::vector<TokenId> &out) const {
  std::vector<std::size_t> bounds;  // character boundaries
  for (std::size_t i = 0; i < word.size();) {
    bounds.push_back(i);
    i += std::min(utf8_seq_len(static_cast<unsigned char>(word[i])), word.size() - i);
  }
  bounds.push_back(word.size());
  const std::size_t nchars = bounds.size() - 1;
  if (nchars > max_chars_) {
    if (unk_) out.push_back(*unk_);
    return;
  }
  const std::size_t mark = out.size();
  std::string key;
  std::size_t start = 0;
  while (start < nchars) {
    std::size_t end = nchars;
    TokenId found = -1;
    while (end > start) {
      key.clear();
      if (start > 0) key = prefix_;
      key.append(word.substr(bounds[start], bounds[end] - bounds[start]));
      auto it = by_piece_.find(key);
      if (it != by_piece_.end()) {
        found = it->second;
        break;
      }
      --end;
    }
    if (found < 0) {
      out.resize(mark);
      if (unk_) out.push_back(*unk_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

}  // namespace keel::text
