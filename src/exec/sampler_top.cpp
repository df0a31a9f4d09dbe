#include "exec/sampler_top.h"

#include <algorithm>

namespace keel {

namespace {

constexpr std::size_t kBlock = 64;

// Whether any of x[0, n) is above thr (NaN never is). A max over lanes: vectorizes.
bool any_above(const float *x, std::size_t n, float thr) {
  float m = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m > thr;
}

}  // namespace

void select_top(std::span<const float> x, std::int64_t k, std::vector<std::uint64_t> &keys) {
  keys.clear();
  const std::size_t V = x.size();
  if (k <= 0 || V == 0) return;
  const std::size_t want = static_cast<std::size_t>(std::min<std::int64_t>(k, V));
  if (want == V) {
    keys.resize(V);
    for (std::size_t i = 0; i < V; ++i) keys[i] = sample_key(x[i], static_cast<std::int32_t>(i));
    std::sort(keys.begin(), keys.end());
    return;
  }
  // Entries are visited in id order, so one equal to the current k-th value ranks below
  // it: only values strictly above the threshold can enter.
  const std::size_t cap = std::max<std::size_t>(2 * want, 64);
  keys.reserve(cap);
  float thr = -std::numeric_limits<float>::infinity();
  auto compact = [&] {
    std::nth_element(keys.begin(), keys.begin() + (want - 1), keys.end());
    keys.resize(want);
    const std::uint32_t ordered = ~static_cast<std::uint32_t>(keys[want - 1] >> 32);
    thr = std::bit_cast<float>((ordered & 0x80000000u) ? (ordered & 0x7fffffffu) : ~ordered);
  };
  for (std::size_t b = 0; b < V; b += kBlock) {
    const std::size_t e = std::min(V, b + kBlock);
    if (!any_above(x.data() + b, e - b, thr)) continue;
    for (std::size_t i = b; i < e; ++i) {
      if (!(x[i] > thr)) continue;
      keys.push_back(sample_key(x[i], static_cast<std::int32_t>(i)));
      if (keys.size() == cap) compact();
    }
  }
  if (keys.size() > want) compact();
  // Fewer than k entries above -inf: the rest are -inf (or NaN) entries, lowest ids first.
  for (std::size_t i = 0; i < V && keys.size() < want; ++i)
    if (!(x[i] > -std::numeric_limits<float>::infinity()))
      keys.push_back(sample_key(x[i], static_cast<std::int32_t>(i)));
  std::sort(keys.begin(), keys.end());
}

}  // namespace keel
