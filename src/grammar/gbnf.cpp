#include "grammar/gbnf.h"

#include <cctype>
#include <string>
#include <vector>

#include "core/error.h"
#include "text/utf8.h"

namespace keel::grammar {

namespace {

using ExprId = GrammarBuilder::ExprId;
constexpr int kMaxRepeat = 1000;
constexpr int kMaxNesting = 100;

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view s) : s_(s) {}

  Grammar run() {
    skip_space();
    while (!at_end()) {
      std::string name = identifier();
      if (name.empty()) fail("expected a rule name");
      skip_space();
      if (s_.substr(i_, 3) != "::=") fail("expected '::=' after '" + name + "'");
      i_ += 3;
      std::uint32_t r = rule(name);
      if (defined_.size() <= r) defined_.resize(r + 1, 0);
      if (defined_[r]) fail("rule '" + name + "' is defined twice");
      defined_[r] = 1;
      b_.set_body(r, alternatives(0));
      skip_space();
    }
    int root = b_.find_rule("root");
    if (root < 0 || std::size_t(root) >= defined_.size() || !defined_[root])
      throw Error(ErrorCode::kInvalidArgument, "grammar: no rule named 'root'");
    return b_.build(std::uint32_t(root));
  }

 private:
  [[noreturn]] void fail(const std::string &why) const {
    std::size_t line = 1, col = 1;
    for (std::size_t k = 0; k < i_ && k < s_.size(); ++k) {
      if (s_[k] == '\n')
        ++line, col = 1;
      else
        ++col;
    }
    throw Error(ErrorCode::kInvalidArgument, "grammar: line " + std::to_string(line) + ", column " +
                                                 std::to_string(col) + ": " + why);
  }
  bool at_end() const { return i_ >= s_.size(); }
  static bool is_name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  }

  void skip_space() {
    while (!at_end()) {
      char c = s_[i_];
      if (c == '#') {
        while (!at_end() && s_[i_] != '\n') ++i_;
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string identifier() {
    std::size_t start = i_;
    while (!at_end() && is_name_char(s_[i_]) && s_[i_] != '.') ++i_;
    // Names may contain dots only inside (a.b), never end in one.
    while (!at_end() && (is_name_char(s_[i_]))) ++i_;
    return std::string(s_.substr(start, i_ - start));
  }

  // After whitespace: is this the start of the next rule (`name ::=`)?
  bool at_rule_start() const {
    std::size_t k = i_;
    while (k < s_.size() && is_name_char(s_[k])) ++k;
    if (k == i_) return false;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t' || s_[k] == '\r' || s_[k] == '\n')) ++k;
    return s_.substr(k, 3) == "::=";
  }

  std::uint32_t rule(const std::string &name) {
    int r = b_.find_rule(name);
    return r >= 0 ? std::uint32_t(r) : b_.add_rule(name);
  }

  ExprId alternatives(int depth) {
    if (depth > kMaxNesting) fail("groups nested too deeply");
    std::vector<ExprId> options{sequence(depth)};
    while (!at_end() && s_[i_] == '|') {
      ++i_;
      options.push_back(sequence(depth));
    }
    return b_.alt(std::move(options));
  }

  ExprId sequence(int depth) {
    std::vector<ExprId> parts;
    while (true) {
      skip_space();
      if (at_end() || s_[i_] == '|' || s_[i_] == ')') break;
      if (depth == 0 && at_rule_start()) break;
      ExprId a = atom(depth);
      parts.push_back(quantified(a));
    }
    return parts.empty() ? b_.empty() : b_.seq(std::move(parts));
  }

  int number() {
    long v = 0;
    std::size_t start = i_;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(s_[i_]))) {
      v = v * 10 + (s_[i_++] - '0');
      if (v > kMaxRepeat) fail("a repetition count over " + std::to_string(kMaxRepeat));
    }
    if (start == i_) fail("expected a number");
    return int(v);
  }

  ExprId quantified(ExprId a) {
    while (!at_end()) {
      char c = s_[i_];
      if (c == '*') {
        ++i_;
        a = b_.repeat(a, 0, -1);
      } else if (c == '+') {
        ++i_;
        a = b_.repeat(a, 1, -1);
      } else if (c == '?') {
        ++i_;
        a = b_.repeat(a, 0, 1);
      } else if (c == '{') {
        ++i_;
        skip_space();
        int min = number(), max = min;
        skip_space();
        if (!at_end() && s_[i_] == ',') {
          ++i_;
          skip_space();
          max = (!at_end() && s_[i_] == '}') ? -1 : number();
          skip_space();
        }
        if (at_end() || s_[i_] != '}') fail("expected '}'");
        ++i_;
        if (max >= 0 && max < min) fail("a repetition {m,n} with n < m");
        a = b_.repeat(a, min, max);
      } else {
        break;
      }
    }
    return a;
  }

  char32_t hex(int digits) {
    char32_t v = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      if (at_end() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) fail("a bad hex escape");
      char c = s_[i_];
      v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }

  // One (possibly escaped) character of a literal or class.
  char32_t character() {
    if (at_end()) fail("unexpected end of the grammar");
    if (s_[i_] == '\\') {
      ++i_;
      if (at_end()) fail("a trailing backslash");
      char c = s_[i_++];
      switch (c) {
        case 'n':
          return '\n';
        case 't':
          return '\t';
        case 'r':
          return '\r';
        case '0':
          return 0;
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U':
          return hex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          return char32_t(c);
        default:
          --i_;
          fail(std::string("an unknown escape \\") + c);
      }
    }
    char32_t cp;
    std::size_t len;
    if (!text::utf8_decode(s_, i_, cp, len)) fail("invalid UTF-8");
    i_ += len;
    return cp;
  }

  ExprId atom(int depth) {
    char c = s_[i_];
    if (c == '"') {
      ++i_;
      std::string lit;
      while (true) {
        if (at_end() || s_[i_] == '\n') fail("an unterminated string literal");
        if (s_[i_] == '"') break;
        text::utf8_append(lit, character());
      }
      ++i_;
      return b_.literal(lit);
    }
    if (c == '[') {
      ++i_;
      bool negated = false;
      if (!at_end() && s_[i_] == '^') negated = true, ++i_;
      std::vector<GrammarBuilder::CodeRange> ranges;
      while (true) {
        if (at_end()) fail("an unterminated character class");
        if (s_[i_] == ']') break;
        char32_t lo = character(), hi = lo;
        if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
          ++i_;
          hi = character();
          if (hi < lo) fail("a range out of order");
        }
        ranges.push_back({lo, hi});
      }
      ++i_;
      return b_.char_class(std::move(ranges), negated);
    }
    if (c == '.') {
      ++i_;
      return b_.any_char();
    }
    if (c == '(') {
      ++i_;
      ExprId e = alternatives(depth + 1);
      skip_space();
      if (at_end() || s_[i_] != ')') fail("expected ')'");
      ++i_;
      return e;
    }
    if (is_name_char(c)) {
      std::string name = identifier();
      return b_.call(rule(name));
    }
    fail(std::string("unexpected '") + c + "'");
  }

  std::string_view s_;
  std::size_t i_ = 0;
  GrammarBuilder b_;
  std::vector<char> defined_;
};

}  // namespace

Grammar gbnf_grammar(std::string_view text) { return GbnfParser(text).run(); }

}  // namespace keel::grammar
