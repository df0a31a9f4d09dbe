// Byte-pair encoding. Two flavours share the merge loop:
// - byte level (GPT-2, Llama 3, Qwen, tiktoken): a word's bytes are the initial
//   symbols, and the vocabulary is held as raw bytes (the "Ġ" alphabet is undone at
//   load time), so no per-character remapping happens while encoding;
// - character level with byte fallback (Llama 2, Mistral, SentencePiece BPE): UTF-8
//   characters are the initial symbols; one missing from the vocabulary becomes its
//   <0xXX> byte tokens, or the unknown token.
// Merges apply lowest rank first, leftmost on ties (HF tokenizers, tiktoken and
// SentencePiece all agree on that order once ranks are given).
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/flat_pair_map.h"
#include "text/model.h"
#include "text/word_cache.h"

namespace keel::text {

struct BpeOptions {
  bool byte_level = false;
  bool byte_fallback = false;  // character level only
  bool fuse_unk = false;
  bool ignore_merges = false;  // a word that is itself a token is emitted whole
  std::optional<TokenId> unk;
};

struct BpeMerge {
  TokenId left, right, result;
  std::int32_t rank;
};

class BpeModel final : public Model {
 public:
  // symbols[id]: the id's string in model space (raw bytes when byte_level); empty
  // strings are not part of the model (added tokens handled elsewhere).
  BpeModel(std::vector<std::string> symbols, const std::vector<BpeMerge> &merges,
           BpeOptions options);

  void encode_word(std::string_view word, std::vector<TokenId> &out) const override;

  std::optional<TokenId> find(std::string_view symbol) const;
  std::size_t merge_count() const { return merges_.size(); }

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  void initial_symbols(std::string_view word, std::vector<TokenId> &syms) const;
  static constexpr std::size_t kSmallWord = 96;
  // Merge the symbols in place; return how many remain.
  std::size_t merge(std::span<TokenId> syms) const;
  std::size_t merge_small(std::span<TokenId> syms) const;
  std::size_t merge_heap(std::span<TokenId> syms) const;

  BpeOptions opt_;
  std::unordered_map<std::string, TokenId, Hash, std::equal_to<>> by_symbol_;
  std::array<TokenId, 256> byte_token_{};      // byte level: the token of each byte
  std::array<TokenId, 256> fallback_token_{};  // char level: the <0xXX> tokens
  FlatPairMap merges_;
  WordCache cache_;
};

}  // namespace keel::text
