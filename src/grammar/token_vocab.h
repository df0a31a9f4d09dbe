// A vocabulary as the grammar sees it: each token id's bytes, the end-of-sequence ids,
// and a byte trie of all tokens in preorder (a subtree is a contiguous index range),
// so a mask walks shared prefixes once and skips a rejected prefix's whole subtree.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ids.h"

namespace keel {
class Tokenizer;
}

namespace keel::grammar {

class TokenVocab {
 public:
  struct TrieNode {
    std::uint8_t byte = 0;    // the byte that leads here from the parent
    std::uint16_t depth = 0;  // bytes from the root (the root is 0)
    std::uint32_t parent = 0;
    std::uint32_t end = 0;                           // one past the last node of this subtree
    std::uint32_t tokens_begin = 0, tokens_end = 0;  // into trie_tokens()
  };

  // `bytes[id]` is token id's text; ids listed in `excluded` (special tokens) and
  // tokens with no bytes are never allowed by a grammar, except EOS ids at the end.
  TokenVocab(std::vector<std::string> bytes, std::vector<TokenId> eos_ids,
             const std::vector<TokenId> &excluded);
  // A tokenizer's vocabulary; `size` (the logits row width) may exceed its own.
  static std::shared_ptr<const TokenVocab> from_tokenizer(const Tokenizer &tok,
                                                          std::size_t size = 0);

  std::size_t size() const { return bytes_.size(); }
  const std::string &bytes(TokenId id) const { return bytes_[id]; }
  const std::vector<TokenId> &eos_ids() const { return eos_; }
  bool is_eos(TokenId id) const;
  const std::vector<TrieNode> &trie() const { return trie_; }
  const std::vector<TokenId> &trie_tokens() const { return trie_tokens_; }
  std::size_t max_token_len() const { return max_len_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<TokenId> eos_;
  std::vector<TrieNode> trie_;
  std::vector<TokenId> trie_tokens_;
  std::size_t max_len_ = 0;
};

}  // namespace keel::grammar
