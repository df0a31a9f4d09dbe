#include "grammar/utf8_ranges.h"

#include <algorithm>

#include "text/utf8.h"

namespace keel::grammar {

namespace {

constexpr char32_t kMaxScalar = 0x10FFFF;

std::size_t encoded_len(char32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

// Splits [lo, hi] (same encoded length) until each piece is a product of byte ranges.
void split(char32_t lo, char32_t hi, std::vector<Utf8Sequence> &out) {
  const std::size_t n = encoded_len(lo);
  for (std::size_t i = 1; i < n; ++i) {
    const char32_t m = (char32_t(1) << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  text::utf8_append(a, lo);
  text::utf8_append(b, hi);
  Utf8Sequence s;
  s.len = n;
  for (std::size_t i = 0; i < n; ++i) s.lo[i] = std::uint8_t(a[i]), s.hi[i] = std::uint8_t(b[i]);
  out.push_back(s);
}

}  // namespace

std::vector<Utf8Sequence> utf8_sequences(std::vector<std::pair<char32_t, char32_t>> ranges,
                                         bool negated) {
  for (auto &r : ranges) r.second = std::min(r.second, kMaxScalar);
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<char32_t, char32_t>> merged;
  for (auto r : ranges) {
    if (r.first > r.second) continue;
    if (!merged.empty() && r.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  if (negated) {
    std::vector<std::pair<char32_t, char32_t>> inv;
    char32_t next = 0;
    for (auto r : merged) {
      if (r.first > next) inv.push_back({next, r.first - 1});
      next = r.second + 1;
    }
    if (next <= kMaxScalar) inv.push_back({next, kMaxScalar});
    merged = std::move(inv);
  }
  std::vector<Utf8Sequence> out;
  // Without the surrogates, cut at the encoded-length boundaries.
  static constexpr std::pair<char32_t, char32_t> kBands[] = {
      {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, kMaxScalar}};
  for (auto r : merged)
    for (auto band : kBands) {
      char32_t lo = std::max(r.first, band.first), hi = std::min(r.second, band.second);
      if (lo <= hi) split(lo, hi, out);
    }
  return out;
}

}  // namespace keel::grammar
