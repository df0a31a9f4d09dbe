// UTF-8 helpers for the tokenizers. Text that reaches a tokenizer may be invalid
// UTF-8 (it comes from HTTP clients); keel's policy is to replace each maximal
// invalid subsequence with U+FFFD before tokenizing (the Unicode "substitution of
// maximal subparts" practice), so the regexes and normalizers only see valid text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace keel::text {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Length of the UTF-8 sequence that the lead byte announces (1 for invalid leads).
inline std::size_t utf8_seq_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes one code point at s[i]. On invalid input returns false and sets `len`
// to the length of the maximal invalid subpart (at least 1).
bool utf8_decode(std::string_view s, std::size_t i, char32_t &cp, std::size_t &len);

using keel::utf8_append;  // core/utf8.h: the one encoder

bool utf8_valid(std::string_view s);

// `s` with every maximal invalid subsequence replaced by U+FFFD.
std::string utf8_sanitize(std::string_view s);

// The length of the longest prefix of `s` that does not end inside an incomplete
// (but so far valid) multi-byte sequence: bytes after it may still become a
// character when more bytes arrive.
std::size_t utf8_complete_prefix(std::string_view s);

}  // namespace keel::text
