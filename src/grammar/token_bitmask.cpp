#include "grammar/token_bitmask.h"

#include <algorithm>
#include <bit>
#include <limits>

namespace keel::grammar {

void TokenBitmask::set_all() {
  std::fill(words_.begin(), words_.end(), ~0u);
  if (vocab_ % 32) words_.back() = (1u << (vocab_ % 32)) - 1;
}

std::size_t TokenBitmask::count() const {
  std::size_t n = 0;
  for (auto w : words_) n += std::popcount(w);
  return n;
}

void apply_token_bitmask(std::span<float> logits, const TokenBitmask &mask) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const auto words = mask.words();
  const std::size_t covered = std::min(logits.size(), mask.vocab_size());
  for (std::size_t w = 0; w * 32 < covered; ++w) {
    const std::uint32_t bits = words[w];
    if (bits == ~0u) continue;
    const std::size_t end = std::min(covered, w * 32 + 32);
    for (std::size_t i = w * 32; i < end; ++i)
      if (!((bits >> (i - w * 32)) & 1u)) logits[i] = kNegInf;
  }
  for (std::size_t i = covered; i < logits.size(); ++i) logits[i] = kNegInf;
}

}  // namespace keel::grammar
