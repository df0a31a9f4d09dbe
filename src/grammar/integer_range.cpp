#include "grammar/integer_range.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace keel::grammar {

namespace {

using ExprId = GrammarBuilder::ExprId;
constexpr int kMaxDigits = 16;

std::int64_t pow10(int n) {
  std::int64_t v = 1;
  while (n-- > 0) v *= 10;
  return v;
}

ExprId digit_range(GrammarBuilder &b, char lo, char hi) {
  return b.char_class({{char32_t(lo), char32_t(hi)}});
}

// Digit strings of one length between a and b (same length, a <= b).
ExprId same_length(GrammarBuilder &b, const std::string &a, const std::string &z) {
  if (a.size() == 1) return digit_range(b, a[0], z[0]);
  const std::string a_rest = a.substr(1), z_rest = z.substr(1);
  // [a0-z0] then any digits: keeps "1000..9999" linear instead of 3^n.
  if (a_rest.find_first_not_of('0') == std::string::npos &&
      z_rest.find_first_not_of('9') == std::string::npos)
    return b.seq({digit_range(b, a[0], z[0]),
                  b.repeat(digit_range(b, '0', '9'), int(a_rest.size()), int(a_rest.size()))});
  if (a[0] == z[0]) return b.seq({digit_range(b, a[0], a[0]), same_length(b, a_rest, z_rest)});
  std::vector<ExprId> options;
  options.push_back(
      b.seq({digit_range(b, a[0], a[0]), same_length(b, a_rest, std::string(a_rest.size(), '9'))}));
  if (a[0] + 1 <= z[0] - 1)
    options.push_back(
        b.seq({digit_range(b, char(a[0] + 1), char(z[0] - 1)),
               b.repeat(digit_range(b, '0', '9'), int(a_rest.size()), int(a_rest.size()))}));
  options.push_back(
      b.seq({digit_range(b, z[0], z[0]), same_length(b, std::string(z_rest.size(), '0'), z_rest)}));
  return b.alt(std::move(options));
}

// Non-negative integers in [lo, hi] (hi absent: up to kMaxDigits digits).
ExprId natural_range(GrammarBuilder &b, std::int64_t lo, std::optional<std::int64_t> hi) {
  std::vector<ExprId> options;
  if (lo == 0) {
    options.push_back(b.literal("0"));
    lo = 1;
  }
  const std::int64_t top = hi ? *hi : pow10(kMaxDigits) - 1;
  for (int len = 1; len <= kMaxDigits; ++len) {
    const std::int64_t first = std::max(lo, pow10(len - 1)), last = std::min(top, pow10(len) - 1);
    if (first > last) continue;
    options.push_back(same_length(b, std::to_string(first), std::to_string(last)));
  }
  return b.alt(std::move(options));
}

}  // namespace

ExprId integer_range(GrammarBuilder &b, std::optional<std::int64_t> lo,
                     std::optional<std::int64_t> hi) {
  std::vector<ExprId> options;
  // Negative part: "-" then |n| in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const std::int64_t mag_lo = hi ? std::max<std::int64_t>(1, -*hi) : 1;
    std::optional<std::int64_t> mag_hi;
    if (lo) mag_hi = -*lo;
    if (!mag_hi || mag_lo <= *mag_hi)
      options.push_back(b.seq({b.literal("-"), natural_range(b, mag_lo, mag_hi)}));
  }
  if (!hi || *hi >= 0)
    options.push_back(natural_range(b, lo ? std::max<std::int64_t>(0, *lo) : 0, hi));
  KEEL_CHECK(!options.empty());
  return b.alt(std::move(options));
}

}  // namespace keel::grammar
