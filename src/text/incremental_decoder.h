// Streaming detokenization: text for each new token as soon as it is final.
//
// It never emits part of a UTF-8 character: a token that ends inside a character
// (byte-level BPE pieces, <0xXX> byte-fallback tokens) is held until the bytes that
// complete it arrive. Each step decodes a short window of recent tokens and emits
// the growth of that window's text, so decoder rules that look at the context (a
// SentencePiece tokenizer drops the leading space of the first token only) come out
// exactly as a one-shot decode of all the tokens would.
//
// Bytes that can never form a character (a model emitting invalid byte sequences)
// are emitted as U+FFFD once more than 8 tokens are pending, so the window stays
// bounded; flush() emits whatever is pending at the end of the stream.
#pragma once

#include <string>
#include <vector>

#include "core/ids.h"

namespace keel {

class Tokenizer;

class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer &tok, bool skip_special = true)
      : tok_(tok), skip_special_(skip_special) {}

  // Adds one token; returns the text that became final (often empty or one piece).
  std::string add(TokenId id);
  // End of stream: the text still held back (incomplete bytes become U+FFFD).
  std::string flush();

  const std::vector<TokenId> &tokens() const { return ids_; }

 private:
  std::string window(std::size_t begin, std::size_t end) const;

  const Tokenizer &tok_;
  bool skip_special_;
  std::vector<TokenId> ids_;
  std::size_t prefix_offset_ = 0;  // start of the context window
  std::size_t read_offset_ = 0;    // tokens before this are emitted
};

}  // namespace keel
