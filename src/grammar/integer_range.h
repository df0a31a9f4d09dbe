// Decimal integers between optional bounds as a grammar expression (no leading
// zeros, no "-0"), digit by digit: [17, 342] is 1[7-9] | [2-9]\d | [1-2]\d\d | 3[0-3]\d | 34[0-2].
#pragma once

#include <cstdint>
#include <optional>

#include "grammar/grammar.h"

namespace keel::grammar {

// Bounds are inclusive; |bound| <= 1e15. Unbounded sides allow up to 16 digits.
GrammarBuilder::ExprId integer_range(GrammarBuilder &b, std::optional<std::int64_t> lo,
                                     std::optional<std::int64_t> hi);

}  // namespace keel::grammar
