#include "grammar/regex_compiler.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "text/utf8.h"

namespace keel::grammar {

namespace {

using Range = GrammarBuilder::CodeRange;
using ExprId = GrammarBuilder::ExprId;

constexpr int kMaxCount = 1000;  // the largest {n,m} bound accepted
constexpr int kMaxGroupDepth = 100;

std::vector<Range> complement(std::vector<Range> rs) {
  std::sort(rs.begin(), rs.end());
  std::vector<Range> out;
  char32_t next = 0;
  for (auto r : rs) {
    if (r.first > next) out.push_back({next, r.first - 1});
    next = std::max<char32_t>(next, r.second + 1);
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

const std::vector<Range> kDigit{{'0', '9'}};
const std::vector<Range> kWord{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<Range> kSpace{{'\t', '\r'}, {' ', ' '}};

class RegexParser {
 public:
  RegexParser(GrammarBuilder &b, std::string_view p, const std::string &where, bool json_string)
      : b_(b), p_(p), where_(where), json_(json_string) {}

  ExprId parse() {
    if (!p_.empty() && p_[0] == '^') ++i_;
    ExprId e = alternation(0);
    if (i_ < p_.size()) fail("unmatched ')'");
    return e;
  }
  // The lengths in characters of the texts `e` (made by this parser) matches.
  RegexLengths lengths(ExprId e) const { return len_.at(e); }

 private:
  [[noreturn]] void fail(const std::string &why) const {
    throw Error(ErrorCode::kInvalidArgument,
                where_ + ": " + why + " at offset " + std::to_string(i_) + " of the regex");
  }
  bool at_end() const { return i_ >= p_.size(); }
  char peek() const { return p_[i_]; }

  ExprId alternation(int depth) {
    if (depth > kMaxGroupDepth) fail("groups nested too deeply");
    std::vector<ExprId> options{sequence(depth)};
    while (!at_end() && peek() == '|') {
      ++i_;
      options.push_back(sequence(depth));
    }
    RegexLengths l = len_.at(options[0]);
    for (ExprId o : options) {
      const RegexLengths x = len_.at(o);
      l.min = std::min(l.min, x.min);
      l.max = (l.max < 0 || x.max < 0) ? -1 : std::max(l.max, x.max);
    }
    return with(b_.alt(std::move(options)), l);
  }

  ExprId sequence(int depth) {
    std::vector<ExprId> parts;
    RegexLengths l{0, 0};
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && i_ + 1 == p_.size()) {
        ++i_;
        break;
      }
      ExprId a = atom(depth);
      parts.push_back(quantified(a));
      const RegexLengths x = len_.at(parts.back());
      l.min = capped(l.min + x.min);
      l.max = (l.max < 0 || x.max < 0) ? -1 : capped(l.max + x.max);
    }
    return with(parts.empty() ? b_.empty() : b_.seq(std::move(parts)), l);
  }

  int number() {
    std::size_t start = i_;
    long v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxCount) fail("a repetition count over " + std::to_string(kMaxCount));
      ++i_;
    }
    if (i_ == start) fail("a repetition without a number");
    return int(v);
  }

  ExprId quantified(ExprId a) {
    while (!at_end()) {
      int min, max;
      char c = peek();
      if (c == '*') {
        min = 0, max = -1, ++i_;
      } else if (c == '+') {
        min = 1, max = -1, ++i_;
      } else if (c == '?') {
        min = 0, max = 1, ++i_;
      } else if (c == '{' && i_ + 1 < p_.size() && p_[i_ + 1] >= '0' && p_[i_ + 1] <= '9') {
        ++i_;
        min = max = number();
        if (!at_end() && peek() == ',') {
          ++i_;
          max = (!at_end() && peek() == '}') ? -1 : number();
        }
        if (at_end() || peek() != '}') fail("an unterminated {n,m}");
        ++i_;
        if (max >= 0 && max < min) fail("a repetition {n,m} with m < n");
      } else {
        return a;
      }
      if (!at_end() && (peek() == '?' || peek() == '+')) ++i_;  // lazy/possessive: same language
      const RegexLengths x = len_.at(a);
      const RegexLengths l{capped(x.min * std::int64_t(min)),
                           (max < 0 || x.max < 0) ? -1 : capped(x.max * std::int64_t(max))};
      a = with(b_.repeat(a, min, max), l);
    }
    return a;
  }

  char32_t code_point() {
    char32_t cp;
    std::size_t len;
    if (!text::utf8_decode(p_, i_, cp, len)) fail("invalid UTF-8");
    i_ += len;
    return cp;
  }

  char32_t hex(std::size_t digits) {
    char32_t v = 0;
    for (std::size_t k = 0; k < digits; ++k, ++i_) {
      if (at_end() || !std::isxdigit(static_cast<unsigned char>(peek()))) fail("a bad hex escape");
      char c = peek();
      v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }

  // An escape after the backslash: a class (\d) into `cls`, or one code point.
  bool escape(std::vector<Range> &cls, char32_t &cp) {
    if (at_end()) fail("a trailing backslash");
    char c = p_[i_++];
    switch (c) {
      case 'd':
        cls = kDigit;
        return true;
      case 'D':
        cls = complement(kDigit);
        return true;
      case 'w':
        cls = kWord;
        return true;
      case 'W':
        cls = complement(kWord);
        return true;
      case 's':
        cls = kSpace;
        return true;
      case 'S':
        cls = complement(kSpace);
        return true;
      case 'n':
        cp = '\n';
        return false;
      case 't':
        cp = '\t';
        return false;
      case 'r':
        cp = '\r';
        return false;
      case 'f':
        cp = '\f';
        return false;
      case 'v':
        cp = '\v';
        return false;
      case '0':
        cp = 0;
        return false;
      case 'x':
        cp = hex(2);
        return false;
      case 'u':
        if (!at_end() && peek() == '{') {
          ++i_;
          cp = 0;
          int n = 0;
          while (!at_end() && peek() != '}' && n++ < 6) cp = cp * 16 + hex(1);
          if (at_end() || peek() != '}' || cp > 0x10FFFF) fail("a bad \\u{...} escape");
          ++i_;
          return false;
        }
        cp = hex(4);
        return false;
      case 'b':
      case 'B':
        --i_;
        fail("word boundaries (\\b) are not supported");
      case 'p':
      case 'P':
        --i_;
        fail("Unicode properties (\\p) are not supported");
      default:
        if (c >= '1' && c <= '9') {
          --i_;
          fail("backreferences are not supported");
        }
        if (std::isalnum(static_cast<unsigned char>(c))) {
          --i_;
          fail(std::string("an unknown escape \\") + c);
        }
        --i_;
        cp = code_point();
        return false;
    }
  }

  ExprId char_class() {
    bool negated = false;
    if (!at_end() && peek() == '^') negated = true, ++i_;
    std::vector<Range> ranges;
    bool first = true;
    while (true) {
      if (at_end()) fail("an unterminated [...]");
      if (peek() == ']' && !first) break;
      first = false;
      char32_t lo;
      if (peek() == '\\') {
        ++i_;
        std::vector<Range> cls;
        if (escape(cls, lo)) {
          ranges.insert(ranges.end(), cls.begin(), cls.end());
          continue;
        }
      } else if (peek() == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
        fail("POSIX classes ([:alpha:]) are not supported");
      } else {
        lo = code_point();
      }
      char32_t hi = lo;
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          ++i_;
          std::vector<Range> cls;
          if (escape(cls, hi)) fail("a class escape as a range end");
        } else {
          hi = code_point();
        }
        if (hi < lo) fail("a range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++i_;  // ']'
    return make_class(std::move(ranges), negated);
  }

  ExprId atom(int depth) {
    char c = peek();
    switch (c) {
      case '(': {
        ++i_;
        if (!at_end() && peek() == '?') {
          ++i_;
          if (!at_end() && peek() == ':') {
            ++i_;
          } else if (!at_end() && (peek() == '<' || peek() == 'P') &&
                     !(peek() == '<' && i_ + 1 < p_.size() &&
                       (p_[i_ + 1] == '=' || p_[i_ + 1] == '!'))) {
            while (!at_end() && peek() != '>') ++i_;  // a named group
            if (at_end()) fail("an unterminated group name");
            ++i_;
          } else {
            fail("lookaround and inline flags are not supported");
          }
        }
        ExprId e = alternation(depth + 1);
        if (at_end() || peek() != ')') fail("a missing ')'");
        ++i_;
        return e;
      }
      case '[':
        ++i_;
        return with(char_class(), {1, 1});
      case '.':
        ++i_;
        return with(make_class({{'\n', '\n'}}, true), {1, 1});
      case '\\': {
        ++i_;
        std::vector<Range> cls;
        char32_t cp;
        if (escape(cls, cp)) return with(make_class(std::move(cls), false), {1, 1});
        return with(one_char(cp), {1, 1});
      }
      case '*':
      case '+':
      case '?':
        fail("a quantifier with nothing to repeat");
      case '^':
        fail("'^' inside the pattern is not supported");
      case '$':
        fail("'$' inside the pattern is not supported");
      default: {
        return with(one_char(code_point()), {1, 1});
      }
    }
  }

  // One code point; inside a JSON string, those that JSON escapes are spelled escaped.
  ExprId one_char(char32_t cp) {
    std::string s;
    if (json_ && (cp < 0x20 || cp == '"' || cp == '\\')) {
      static const char *kHex = "0123456789abcdef";
      switch (cp) {
        case '"':
          s = "\\\"";
          break;
        case '\\':
          s = "\\\\";
          break;
        case '\n':
          s = "\\n";
          break;
        case '\t':
          s = "\\t";
          break;
        case '\r':
          s = "\\r";
          break;
        default:
          s = std::string("\\u00") + kHex[cp >> 4] + kHex[cp & 15];
      }
      return b_.literal(s);
    }
    text::utf8_append(s, cp);
    return b_.literal(s);
  }

  // A class; inside a JSON string the characters JSON escapes are left out (a
  // narrower but always valid language).
  ExprId make_class(std::vector<Range> ranges, bool negated) {
    if (!json_) return b_.char_class(std::move(ranges), negated);
    std::vector<Range> excluded{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    if (negated) {
      ranges.insert(ranges.end(), excluded.begin(), excluded.end());
      return b_.char_class(std::move(ranges), true);
    }
    std::vector<Range> allowed = complement(excluded), out;
    for (auto r : ranges)
      for (auto a : allowed) {
        char32_t lo = std::max(r.first, a.first), hi = std::min(r.second, a.second);
        if (lo <= hi) out.push_back({lo, hi});
      }
    return b_.char_class(std::move(out));
  }

  // Records e's lengths. The builder may hand out one id for equal expressions, which
  // have equal lengths, so one entry per id is enough.
  ExprId with(ExprId e, RegexLengths l) {
    len_[e] = l;
    return e;
  }

  // Nested counted repeats multiply: lengths past 1e12 stay there (no overflow).
  static std::int64_t capped(std::int64_t v) {
    return std::min<std::int64_t>(v, 1'000'000'000'000);
  }

  std::unordered_map<ExprId, RegexLengths> len_;
  GrammarBuilder &b_;
  std::string_view p_;
  const std::string &where_;
  bool json_;
  std::size_t i_ = 0;
};

}  // namespace

GrammarBuilder::ExprId compile_regex(GrammarBuilder &b, std::string_view pattern,
                                     const std::string &where, bool json_string,
                                     RegexLengths *lengths) {
  RegexParser parser(b, pattern, where, json_string);
  const ExprId e = parser.parse();
  if (lengths) *lengths = parser.lengths(e);
  return e;
}

Grammar regex_grammar(std::string_view pattern, const std::string &where) {
  GrammarBuilder b;
  auto root = b.add_rule("root");
  b.set_body(root, compile_regex(b, pattern, where));
  return b.build(root);
}

}  // namespace keel::grammar
