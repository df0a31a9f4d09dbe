// The sampler's order over a row of logits -- logit descending, then id ascending -- as one
// 64-bit key per entry, and the top k entries of a row in that order found by a partial
// selection (a running threshold skips most of the row a block at a time), not a sort.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace keel {

// Ascending keys = the sampler's order. -0 ranks as +0; NaN ranks as -inf.
inline std::uint64_t sample_key(float w, std::int32_t id) {
  if (w != w) w = -std::numeric_limits<float>::infinity();
  const std::uint32_t b = std::bit_cast<std::uint32_t>(w == 0.0f ? 0.0f : w);
  const std::uint32_t ordered = (b & 0x80000000u) ? ~b : (b | 0x80000000u);  // ascending
  return (static_cast<std::uint64_t>(~ordered) << 32) | static_cast<std::uint32_t>(id);
}
inline std::int32_t key_id(std::uint64_t key) {
  return static_cast<std::int32_t>(key & 0xffffffffu);
}

// The min(k, x.size()) best entries of x in the sampler's order (best first), as keys.
// `keys` is reused storage.
void select_top(std::span<const float> x, std::int64_t k, std::vector<std::uint64_t> &keys);

}  // namespace keel
