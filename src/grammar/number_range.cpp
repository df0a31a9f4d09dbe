#include "grammar/number_range.h"

#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "grammar/integer_range.h"

namespace keel::grammar {

namespace {

using ExprId = GrammarBuilder::ExprId;
using MaybeExpr = std::optional<ExprId>;
constexpr int kMaxFraction = 16;

// A non-negative bound as its integer part and fraction digits (no trailing zeros).
struct Magnitude {
  std::int64_t integer = 0;
  std::string fraction;
  bool exclusive = false;
};

std::optional<Magnitude> magnitude(double v, bool exclusive) {
  v = std::abs(v);
  if (!(v <= 1e15)) return std::nullopt;
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
  if (r.ec != std::errc()) return std::nullopt;
  const std::string s(buf, r.ptr);
  const auto dot = s.find('.');
  Magnitude m;
  m.integer = std::stoll(s.substr(0, dot));
  if (dot != std::string::npos) m.fraction = s.substr(dot + 1);
  while (!m.fraction.empty() && m.fraction.back() == '0') m.fraction.pop_back();
  if (m.fraction.size() >= kMaxFraction) return std::nullopt;
  m.exclusive = exclusive;
  return m;
}

class Builder {
 public:
  explicit Builder(GrammarBuilder &b) : b_(b) {}

  ExprId digits(char lo, char hi) { return b_.char_class({{char32_t(lo), char32_t(hi)}}); }
  ExprId any_digits(int min, int max) { return b_.repeat(digits('0', '9'), min, max); }
  ExprId any_fraction() {
    return b_.optional(b_.seq({b_.literal("."), any_digits(1, kMaxFraction)}));
  }

  MaybeExpr alt(std::vector<MaybeExpr> options) {
    std::vector<ExprId> some;
    for (const auto &o : options)
      if (o) some.push_back(*o);
    if (some.empty()) return std::nullopt;
    return some.size() == 1 ? some[0] : b_.alt(std::move(some));
  }

  // Non-empty digit strings f with 0.f <= 0.g (< when strict); g non-empty, no trailing 0.
  MaybeExpr digits_le(std::string_view g, bool strict) {
    const char c = g[0];
    MaybeExpr below, equal;
    if (c > '0') below = b_.seq({digits('0', char(c - 1)), any_digits(0, kMaxFraction - 1)});
    const std::string_view rest = g.substr(1);
    MaybeExpr tail;
    if (rest.empty()) {
      if (!strict) tail = b_.repeat(digits('0', '0'), 0, kMaxFraction - 1);  // equal to g
    } else {
      // Ending here is below g (its rest has a non-zero digit); or continue comparing.
      MaybeExpr more = digits_le(rest, strict);
      tail = more ? b_.optional(*more) : b_.empty();
    }
    if (tail) equal = b_.seq({digits(c, c), *tail});
    return alt({below, equal});
  }

  // Non-empty digit strings f with 0.f >= 0.g (> when strict); g non-empty, no trailing 0.
  MaybeExpr digits_ge(std::string_view g, bool strict) {
    const char c = g[0];
    MaybeExpr above, equal;
    if (c < '9') above = b_.seq({digits(char(c + 1), '9'), any_digits(0, kMaxFraction - 1)});
    const std::string_view rest = g.substr(1);
    MaybeExpr tail;
    if (rest.empty())
      tail = strict ? nonzero_digits() : any_digits(0, kMaxFraction - 1);
    else
      tail = digits_ge(rest, strict);  // ending here would be below g
    if (tail) equal = b_.seq({digits(c, c), *tail});
    return alt({above, equal});
  }

  // Digit strings with a non-zero digit: 0*[1-9][0-9]*.
  ExprId nonzero_digits() {
    return b_.seq({b_.repeat(digits('0', '0'), 0, kMaxFraction - 1), digits('1', '9'),
                   any_digits(0, kMaxFraction - 1)});
  }

  // The fraction part ("" or "." digits) of a number whose integer part is the bound's.
  MaybeExpr fraction_ge(const Magnitude &m) {
    if (m.fraction.empty())
      return m.exclusive ? b_.seq({b_.literal("."), nonzero_digits()}) : any_fraction();
    MaybeExpr f = digits_ge(m.fraction, m.exclusive);
    if (!f) return std::nullopt;
    return b_.seq({b_.literal("."), *f});
  }
  MaybeExpr fraction_le(const Magnitude &m) {
    if (m.fraction.empty()) {
      if (m.exclusive) return std::nullopt;
      return b_.optional(b_.seq({b_.literal("."), b_.repeat(digits('0', '0'), 1, kMaxFraction)}));
    }
    MaybeExpr f = digits_le(m.fraction, m.exclusive);
    return f ? b_.optional(b_.seq({b_.literal("."), *f})) : b_.empty();
  }

  ExprId integer(std::int64_t v) { return b_.literal(std::to_string(v)); }
  MaybeExpr with(MaybeExpr head, MaybeExpr tail) {
    if (!head || !tail) return std::nullopt;
    return b_.seq({*head, *tail});
  }

  // Magnitudes (unsigned numbers) in [a, b] (b absent: unbounded). `ok` false: refused.
  MaybeExpr between(const Magnitude &a, const std::optional<Magnitude> &b, bool &ok) {
    if (b && b->integer == a.integer) {
      // Both bounds on one integer part: only when the lower is that integer, inclusive.
      if (!a.fraction.empty() || a.exclusive) {
        ok = false;
        return std::nullopt;
      }
      return with(integer(a.integer), fraction_le(*b));
    }
    std::vector<MaybeExpr> parts;
    parts.push_back(with(integer(a.integer), fraction_ge(a)));
    if (!b) {
      parts.push_back(b_.seq({integer_range(b_, a.integer + 1, std::nullopt), any_fraction()}));
    } else {
      if (a.integer + 1 <= b->integer - 1)
        parts.push_back(b_.seq({integer_range(b_, a.integer + 1, b->integer - 1), any_fraction()}));
      parts.push_back(with(integer(b->integer), fraction_le(*b)));
    }
    return alt(std::move(parts));
  }

 private:
  GrammarBuilder &b_;
};

}  // namespace

std::optional<ExprId> number_range(GrammarBuilder &gb, std::optional<NumberBound> lo,
                                   std::optional<NumberBound> hi) {
  Builder b(gb);
  std::optional<Magnitude> mlo, mhi;
  if (lo && !(mlo = magnitude(lo->value, lo->exclusive))) return std::nullopt;
  if (hi && !(mhi = magnitude(hi->value, hi->exclusive))) return std::nullopt;
  bool ok = true;
  const Magnitude zero{0, "", false};
  std::vector<MaybeExpr> parts;
  const bool lo_nonneg = lo && lo->value >= 0, hi_nonpos = hi && hi->value <= 0;
  if (lo_nonneg) {
    parts.push_back(b.between(*mlo, mhi, ok));  // x >= lo >= 0
  } else if (hi_nonpos) {
    // x <= hi <= 0: "-" and a magnitude in [|hi|, |lo|].
    parts.push_back(b.with(gb.literal("-"), b.between(*mhi, mlo, ok)));
  } else {
    // lo < 0 < hi (either may be absent): "-" and [0, |lo|] ("-0" is 0, inside), then
    // [0, hi].
    parts.push_back(b.with(gb.literal("-"), b.between(zero, mlo, ok)));
    parts.push_back(b.between(zero, mhi, ok));
  }
  if (!ok) return std::nullopt;
  return b.alt(std::move(parts));
}

}  // namespace keel::grammar
