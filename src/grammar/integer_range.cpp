#include "grammar/integer_range.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace keel::grammar {

namespace {

using ExprId = GrammarBuilder::ExprId;

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

// Magnitudes (non-negative canonical decimals) compared.
int compare_mag(const std::string &a, const std::string &b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : a == b ? 0 : 1;
}

std::string mag_add(std::string a, int delta) {
  if (delta > 0) {
    int i = int(a.size()) - 1;
    while (i >= 0 && a[std::size_t(i)] == '9') a[std::size_t(i--)] = '0';
    if (i < 0)
      a.insert(a.begin(), '1');
    else
      ++a[std::size_t(i)];
    return a;
  }
  int i = int(a.size()) - 1;  // a > 0
  while (a[std::size_t(i)] == '0') a[std::size_t(i--)] = '9';
  --a[std::size_t(i)];
  const auto nz = a.find_first_not_of('0');
  return nz == std::string::npos ? "0" : a.substr(nz);
}

// Non-negative integers in [lo, hi] (hi absent: any number of digits).
ExprId natural_range(GrammarBuilder &b, std::string lo, const std::optional<std::string> &hi) {
  std::vector<ExprId> options;
  if (lo == "0") {
    options.push_back(b.literal("0"));
    if (hi && *hi == "0") return options[0];
    lo = "1";
  }
  const std::size_t last_len = hi ? hi->size() : lo.size();
  for (std::size_t len = lo.size(); len <= last_len; ++len) {
    const std::string first = len == lo.size() ? lo : "1" + std::string(len - 1, '0');
    const std::string last = hi && len == hi->size() ? *hi : std::string(len, '9');
    if (compare_mag(first, last) > 0) continue;
    options.push_back(same_length(b, first, last));
  }
  if (!hi)  // every longer number
    options.push_back(
        b.seq({digit_range(b, '1', '9'), b.repeat(digit_range(b, '0', '9'), int(lo.size()), -1)}));
  return b.alt(std::move(options));
}

}  // namespace

int compare_decimal(const std::string &a, const std::string &b) {
  const bool na = !a.empty() && a[0] == '-', nb = !b.empty() && b[0] == '-';
  if (na != nb) return na ? -1 : 1;
  const int c = compare_mag(na ? a.substr(1) : a, nb ? b.substr(1) : b);
  return na ? -c : c;
}

std::string add_one_decimal(const std::string &a, int delta) {
  const bool neg = !a.empty() && a[0] == '-';
  if (!neg) {
    if (a == "0" && delta < 0) return "-1";
    return mag_add(a, delta);
  }
  const std::string m = mag_add(a.substr(1), -delta);
  return m == "0" ? "0" : "-" + m;
}

ExprId integer_range_dec(GrammarBuilder &b, const std::optional<std::string> &lo,
                         const std::optional<std::string> &hi) {
  std::vector<ExprId> options;
  const bool lo_neg = lo && (*lo)[0] == '-', hi_neg = hi && (*hi)[0] == '-';
  // Negative part: "-" then |n| in [max(1, -hi), -lo].
  if (!lo || lo_neg) {
    const std::string mag_lo = hi_neg ? hi->substr(1) : "1";
    std::optional<std::string> mag_hi;
    if (lo) mag_hi = lo->substr(1);
    if (!mag_hi || compare_mag(mag_lo, *mag_hi) <= 0)
      options.push_back(b.seq({b.literal("-"), natural_range(b, mag_lo, mag_hi)}));
  }
  if (!hi || !hi_neg) options.push_back(natural_range(b, lo && !lo_neg ? *lo : "0", hi));
  KEEL_CHECK(!options.empty());
  return b.alt(std::move(options));
}

ExprId integer_range(GrammarBuilder &b, std::optional<std::int64_t> lo,
                     std::optional<std::int64_t> hi) {
  auto dec = [](std::optional<std::int64_t> x) -> std::optional<std::string> {
    if (!x) return std::nullopt;
    return std::to_string(*x);
  };
  return integer_range_dec(b, dec(lo), dec(hi));
}

}  // namespace keel::grammar
