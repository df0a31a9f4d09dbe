// WordPiece (BERT): greedy longest-match-first over each word; continuation pieces
// carry a prefix ("##"). A word with an unmatchable rest becomes the unknown token.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/model.h"

namespace keel::text {

class WordPieceModel final : public Model {
 public:
  WordPieceModel(std::vector<std::string> pieces, std::string prefix, std::optional<TokenId> unk,
                 std::size_t max_chars_per_word);
  void encode_word(std::string_view word, std::vector<TokenId> &out) const override;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, TokenId, Hash, std::equal_to<>> by_piece_;
  std::string prefix_;
  std::optional<TokenId> unk_;
  std::size_t max_chars_;
};

}  // namespace keel::text
