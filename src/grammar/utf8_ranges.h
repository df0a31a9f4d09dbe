// Code point ranges as UTF-8 byte-range sequences: [U+0080-U+07FF] becomes
// [C2-DF][80-BF], and so on, so a character class is an alternative of byte paths.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace keel::grammar {

struct Utf8Sequence {
  std::size_t len = 0;  // 1 to 4 bytes
  std::array<std::uint8_t, 4> lo{}, hi{};
};

// The sequences matching exactly the scalar values in `ranges` (inclusive; surrogates
// never match), or, when `negated`, every scalar value outside them.
std::vector<Utf8Sequence> utf8_sequences(std::vector<std::pair<char32_t, char32_t>> ranges,
                                         bool negated);

}  // namespace keel::grammar
