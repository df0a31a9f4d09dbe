// Added tokens (special and user-defined) are cut out of the text before the
// normalizer runs, leftmost-longest, as HF tokenizers does.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "core/ids.h"

namespace keel::text {

struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;  // the match absorbs whitespace on its left
  bool rstrip = false;  // ... and on its right
  bool single_word = false;
};

// One piece of the input: plain text to tokenize, or an added token.
struct TextSegment {
  std::string_view text;   // empty for tokens
  std::size_t offset = 0;  // where the text starts in the input
  TokenId token = -1;      // >= 0 for an added token
};

class AddedTokenMatcher {
 public:
  void build(std::vector<AddedToken> tokens);
  bool empty() const { return tokens_.empty(); }
  const std::vector<AddedToken> &tokens() const { return tokens_; }

  // Splits `text`; special tokens match only when allow_special.
  void split(std::string_view text, bool allow_special, std::vector<TextSegment> &out) const;

 private:
  std::vector<AddedToken> tokens_;
  // Indices into tokens_ by first byte, longest content first.
  std::array<std::vector<std::uint32_t>, 256> by_first_;
};

}  // namespace keel::text
