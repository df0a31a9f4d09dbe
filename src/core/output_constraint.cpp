#include "core/output_constraint.h"

#include <algorithm>
#include <limits>

namespace keel {

void apply_token_mask(std::span<float> logits, std::span<const std::uint32_t> mask) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::size_t covered = std::min(logits.size(), mask.size() * 32);
  for (std::size_t w = 0; w * 32 < covered; ++w) {
    const std::uint32_t bits = mask[w];
    if (bits == ~0u) continue;  // most words of a permissive mask
    const std::size_t end = std::min(covered, w * 32 + 32);
    for (std::size_t i = w * 32; i < end; ++i)
      if (!((bits >> (i - w * 32)) & 1u)) logits[i] = kNegInf;
  }
  for (std::size_t i = covered; i < logits.size(); ++i) logits[i] = kNegInf;
}

}  // namespace keel
