// The per-step token mask: bit i of word i/32 set means token i may be sampled.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/ids.h"

namespace keel::grammar {

class TokenBitmask {
 public:
  TokenBitmask() = default;
  explicit TokenBitmask(std::size_t vocab_size)
      : vocab_(vocab_size), words_((vocab_size + 31) / 32, 0) {}

  std::size_t vocab_size() const { return vocab_; }
  // [ceil(vocab / 32)] words, the layout a device sampler uploads as is.
  std::span<const std::uint32_t> words() const { return words_; }
  std::span<std::uint32_t> words() { return words_; }

  void clear() { std::fill(words_.begin(), words_.end(), 0u); }
  void set_all();
  void set(TokenId id) { words_[std::size_t(id) >> 5] |= 1u << (id & 31); }
  bool test(TokenId id) const {
    return id >= 0 && std::size_t(id) < vocab_ && (words_[std::size_t(id) >> 5] >> (id & 31)) & 1u;
  }
  std::size_t count() const;

 private:
  std::size_t vocab_ = 0;
  std::vector<std::uint32_t> words_;
};

// Sets every logit whose token the mask disallows (or that lies past the mask) to -inf.
void apply_token_bitmask(std::span<float> logits, const TokenBitmask &mask);

}  // namespace keel::grammar
