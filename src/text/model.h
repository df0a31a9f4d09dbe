// The tokenizer model stage: turns one pre-token (a "word") into token ids. BPE,
// unigram and WordPiece implement it. Models are immutable after construction and
// safe to call from several threads.
#pragma once

#include <string_view>
#include <vector>

#include "core/ids.h"

namespace keel::text {

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of `word` (already normalized and pre-tokenized) to `out`.
  virtual void encode_word(std::string_view word, std::vector<TokenId> &out) const = 0;
};

}  // namespace keel::text
