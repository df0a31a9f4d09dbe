// JSON numbers (plain decimals, no exponent) between optional bounds, each inclusive or
// exclusive, as a grammar expression: numbers with `minimum` / `maximum` /
// `exclusiveMinimum` / `exclusiveMaximum`. Built from the integer part (integer_range)
// and, at a bound's own integer part, the fraction digits compared digit by digit with
// the bound's (a regular language). Not representable this way, and refused (nullopt):
// two bounds with one integer part when the lower has a fraction or is exclusive
// (0.25 <= x <= 0.75 would need the intersection of two digit languages), and bounds
// with more than 15 fraction digits or beyond 1e15.
#pragma once

#include <optional>

#include "grammar/grammar.h"

namespace keel::grammar {

struct NumberBound {
  double value = 0;
  bool exclusive = false;
};

// Up to 16 fraction digits; an unbounded side allows up to 16 integer digits.
std::optional<GrammarBuilder::ExprId> number_range(GrammarBuilder &b, std::optional<NumberBound> lo,
                                                   std::optional<NumberBound> hi);

}  // namespace keel::grammar
