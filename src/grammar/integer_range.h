// Decimal integers between optional bounds as a grammar expression (no leading
// zeros, no "-0"), digit by digit: [17, 342] is 1[7-9] | [2-9]\d | [1-2]\d\d | 3[0-3]\d | 34[0-2].
// Bounds may be of any size (decimal strings); an unbounded side allows any number of
// digits, as JSON does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "grammar/grammar.h"

namespace keel::grammar {

// Bounds are inclusive.
GrammarBuilder::ExprId integer_range(GrammarBuilder &b, std::optional<std::int64_t> lo,
                                     std::optional<std::int64_t> hi);
// Bounds are inclusive canonical decimal integers ("-12", "0", "9007199254740991": no
// leading zeros, no "+", no "-0"); lo <= hi.
GrammarBuilder::ExprId integer_range_dec(GrammarBuilder &b, const std::optional<std::string> &lo,
                                         const std::optional<std::string> &hi);

// Compares canonical decimal integers: <0, 0, >0.
int compare_decimal(const std::string &a, const std::string &b);
// a + delta (delta = +1 or -1) for a canonical decimal integer.
std::string add_one_decimal(const std::string &a, int delta);

}  // namespace keel::grammar
