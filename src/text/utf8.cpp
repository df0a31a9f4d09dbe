#include "text/utf8.h"

namespace keel::text {

bool utf8_decode(std::string_view s, std::size_t i, char32_t &cp, std::size_t &len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    len = 1;
    return true;
  }
  std::size_t need;
  char32_t min;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3, cp = b0 & 0x0F, min = 0x800;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4, cp = b0 & 0x07, min = 0x10000;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    len = 1;
    return false;
  }
  (void)min;
  std::size_t k = 1;
  for (; k < need; ++k) {
    if (i + k >= s.size()) break;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (k < need) {
    len = k;
    return false;
  }
  len = need;
  return true;
}

bool utf8_valid(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    // Skip ASCII eight bytes at a time: most text is mostly ASCII.
    while (i + 8 <= s.size()) {
      std::uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    char32_t cp;
    std::size_t len;
    if (!utf8_decode(s, i, cp, len)) return false;
    i += len;
  }
  return true;
}

std::string utf8_sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  std::size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    std::size_t len;
    if (utf8_decode(s, i, cp, len)) {
      out.append(s.data() + i, len);
    } else {
      out.append(kReplacementChar);
    }
    i += len;
  }
  return out;
}

std::size_t utf8_complete_prefix(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence is not finished.
  const std::size_t n = s.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking
    if (b < 0x80) return n;
    const std::size_t need = utf8_seq_len(b);
    if (need > back && need > 1) {
      // Only hold back if the partial sequence is valid so far.
      char32_t cp;
      std::size_t len;
      if (!utf8_decode(s, n - back, cp, len) && len == back) return n - back;
    }
    return n;
  }
  return n;
}

}  // namespace keel::text
