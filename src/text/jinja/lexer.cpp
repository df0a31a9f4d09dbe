#include "text/jinja/lexer.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "text/jinja/pystr.h"

namespace keel::jinja {
namespace {

// str.splitlines() then "\n".join(): every Python line boundary becomes \n and a
// final line break disappears (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '\r') {
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
      out.push_back('\n');
    } else if (c == '\n' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E)) {
      out.push_back('\n');
    } else if (c == 0xC2 && i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85) {
      out.push_back('\n');
      ++i;
    } else if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 ||
                static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      out.push_back('\n');
      i += 2;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Python's str.rstrip()/\s*: ASCII whitespace plus the Unicode spaces.
size_t rstrip_end(std::string_view s) {
  auto cps = py::decode(s);
  size_t e = cps.size();
  while (e > 0 && py::is_space(cps[e - 1])) --e;
  if (e == cps.size()) return s.size();
  return py::encode(std::vector<char32_t>(cps.begin(), cps.begin() + e)).size();
}

size_t skip_space(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    auto c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) {
      if (!py::is_space(c)) break;
      ++pos;
      continue;
    }
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (pos + n > s.size()) break;
    auto cps = py::decode(s.substr(pos, n));
    if (cps.size() != 1 || !py::is_space(cps[0])) break;
    pos += n;
  }
  return pos;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions &o) : src_(std::move(src)), opt_(o) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    const size_t n = src_.size();
    while (pos < n) {
      size_t start = find_tag(pos);
      std::string text = src_.substr(pos, start - pos);
      if (start >= n) {
        push_text(std::move(text), pos);
        break;
      }
      char kind = src_[start + 1];
      char mod = start + 2 < n ? src_[start + 2] : '\0';
      if (mod == '-') {
        text.resize(rstrip_end(text));
      } else if ((kind == '%' || kind == '#') && opt_.lstrip_blocks && mod != '+') {
        size_t nl = text.rfind('\n');
        size_t lpos = nl == std::string::npos ? 0 : nl + 1;
        bool line_start = lpos > 0 || pos == 0 || src_[pos - 1] == '\n';
        if (line_start && std::all_of(text.begin() + static_cast<long>(lpos), text.end(),
                                      [](char c) { return c == ' ' || c == '\t'; }))
          text.resize(lpos);
      }
      push_text(std::move(text), pos);
      size_t body = start + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(start, body);
      } else if (kind == '%' && is_raw(body)) {
        pos = lex_raw(start, body);
      } else {
        pos = lex_tag(start, body, kind == '{' ? TokenKind::kVarBegin : TokenKind::kBlockBegin);
      }
    }
    Token eof{TokenKind::kEof, "", 0, 0, 0, 0};
    locate(eof, n);
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t pos) const {
    while (true) {
      size_t p = src_.find('{', pos);
      if (p == std::string::npos || p + 1 >= src_.size()) return src_.size();
      char c = src_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  void locate(Token &t, size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
    t.line = static_cast<int>(idx + 1);
    t.column = static_cast<int>(pos - line_starts_[idx] + 1);
  }

  [[noreturn]] void error(size_t pos, const std::string &msg) const {
    Token t;
    locate(t, pos);
    throw Error(ErrorCode::kInvalidArgument, "template line " + std::to_string(t.line) +
                                                 ", column " + std::to_string(t.column) + ": " +
                                                 msg);
  }

  void push(TokenKind k, std::string text, size_t pos) {
    Token t{k, std::move(text), 0, 0, 0, 0};
    locate(t, pos);
    tokens_.push_back(std::move(t));
  }

  void push_text(std::string text, size_t pos) {
    if (!text.empty()) push(TokenKind::kText, std::move(text), pos);
  }

  // After a block or comment end: `-` eats all whitespace, trim_blocks one newline.
  size_t after_block_end(size_t pos, char mod) const {
    if (mod == '-') return skip_space(src_, pos);
    if (mod != '+' && opt_.trim_blocks && pos < src_.size() && src_[pos] == '\n') return pos + 1;
    return pos;
  }

  size_t lex_comment(size_t start, size_t body) {
    size_t end = src_.find("#}", body);
    if (end == std::string::npos) error(start, "missing end of comment tag");
    char mod = end > body && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    return after_block_end(end + 2, mod);
  }

  // {% raw %} ... {% endraw %}: the data in between is text, untouched.
  bool is_raw(size_t body) const {
    size_t p = skip_space(src_, body);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
      return false;
    p = skip_space(src_, p);
    if (p < src_.size() && src_[p] == '-') ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  size_t lex_raw(size_t start, size_t body) {
    size_t p = src_.find("%}", body);
    char open_mod = src_[p - 1] == '-' ? '-' : '\0';
    size_t data_start = after_block_end(p + 2, open_mod);
    size_t search = data_start;
    while (true) {
      size_t q = src_.find("{%", search);
      if (q == std::string::npos) error(start, "missing end of raw directive");
      size_t r = q + 2;
      char mod = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : '\0';
      if (mod) ++r;
      r = skip_space(src_, r);
      if (src_.compare(r, 6, "endraw") == 0) {
        r = skip_space(src_, r + 6);
        char end_mod = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r] : '\0';
        if (end_mod) ++r;
        if (src_.compare(r, 2, "%}") == 0) {
          std::string data = src_.substr(data_start, q - data_start);
          if (mod == '-') data.resize(rstrip_end(data));
          push_text(std::move(data), data_start);
          return after_block_end(r + 2, end_mod);
        }
      }
      search = q + 2;
    }
  }

  size_t lex_tag(size_t start, size_t pos, TokenKind begin) {
    push(begin, "", start);
    const bool var = begin == TokenKind::kVarBegin;
    std::vector<char> stack;
    const size_t n = src_.size();
    while (true) {
      while (pos < n && is_ws(src_[pos])) ++pos;
      if (pos >= n)
        error(start, var ? "unexpected end of template, expected '}}'"
                         : "unexpected end of template, expected '%}'");
      if (stack.empty()) {
        if (var && src_.compare(pos, 3, "-}}") == 0) {
          push(TokenKind::kVarEnd, "", pos);
          return skip_space(src_, pos + 3);
        }
        if (var && src_.compare(pos, 2, "}}") == 0) {
          push(TokenKind::kVarEnd, "", pos);
          return pos + 2;
        }
        if (!var && (src_.compare(pos, 3, "-%}") == 0 || src_.compare(pos, 3, "+%}") == 0)) {
          push(TokenKind::kBlockEnd, "", pos);
          return after_block_end(pos + 3, src_[pos]);
        }
        if (!var && src_.compare(pos, 2, "%}") == 0) {
          push(TokenKind::kBlockEnd, "", pos);
          return after_block_end(pos + 2, '\0');
        }
      }
      char c = src_[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos;
        while (e < n && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        push(TokenKind::kName, src_.substr(pos, e - pos), pos);
        pos = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = lex_number(pos);
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        static const char *kOps2[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char *o : kOps2)
          if (src_.compare(pos, 2, o) == 0) op = o;
        if (op.empty()) {
          if (std::string_view("+-/*%~<>=()[]{},.:|;!").find(c) == std::string_view::npos)
            error(pos, std::string("unexpected char '") + c + "'");
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') {
            stack.push_back(c);
          } else if (c == ')' || c == ']' || c == '}') {
            char want = c == ')' ? '(' : c == ']' ? '[' : '{';
            if (stack.empty() || stack.back() != want)
              error(pos, std::string("unexpected '") + c + "'");
            stack.pop_back();
          }
        }
        push(TokenKind::kOp, op, pos);
        pos += op.size();
      }
    }
  }

  size_t lex_number(size_t pos) {
    const size_t n = src_.size();
    auto digits = [&](size_t p) {
      while (p < n && (std::isdigit(static_cast<unsigned char>(src_[p])) ||
                       (src_[p] == '_' && p + 1 < n &&
                        std::isdigit(static_cast<unsigned char>(src_[p + 1])))))
        ++p;
      return p;
    };
    size_t e = digits(pos);
    bool is_float = false;
    bool after_dot = pos > 0 && src_[pos - 1] == '.';  // x.0.1 is two lookups, not a float
    if (!after_dot && e + 1 < n && src_[e] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < n && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t p = e + 1;
      if (p < n && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < n && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        e = digits(p);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos; i < e; ++i)
      if (src_[i] != '_') text.push_back(src_[i]);
    Token t{is_float ? TokenKind::kFloat : TokenKind::kInt, text, 0, 0, 0, 0};
    locate(t, pos);
    if (is_float) {
      t.fval = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      char *end = nullptr;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (errno == ERANGE) error(pos, "integer literal too large");
      t.ival = v;
    }
    tokens_.push_back(std::move(t));
    return e;
  }

  // Decodes a literal as Python's unicode-escape does.
  size_t lex_string(size_t pos) {
    const char q = src_[pos];
    const size_t n = src_.size();
    std::string out;
    size_t p = pos + 1;
    while (true) {
      if (p >= n) error(pos, "unterminated string literal");
      char c = src_[p];
      if (c == q) break;
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= n) error(pos, "unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      auto hex = [&](int count) -> char32_t {
        if (p + count > n) error(pos, "truncated \\x/\\u escape in string literal");
        char32_t v = 0;
        for (int k = 0; k < count; ++k) {
          char h = src_[p + k];
          int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                  : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                              : -1;
          if (d < 0) error(pos, "truncated \\x/\\u escape in string literal");
          v = v * 16 + static_cast<char32_t>(d);
        }
        p += count;
        return v;
      };
      switch (e) {
        case '\n':
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
          utf8_append(out, hex(2));
          break;
        case 'u':
          utf8_append(out, hex(4));
          break;
        case 'U': {
          char32_t v = hex(8);
          if (v > 0x10FFFF) error(pos, "illegal Unicode character in string literal");
          utf8_append(out, v);
          break;
        }
        case 'N':
          error(pos, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < n && src_[p] >= '0' && src_[p] <= '7'; ++k, ++p)
              v = v * 8 + static_cast<char32_t>(src_[p] - '0');
            utf8_append(out, v);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    Token t{TokenKind::kString, std::move(out), 0, 0, 0, 0};
    locate(t, pos);
    tokens_.push_back(std::move(t));
    return p + 1;
  }

  std::string src_;
  LexOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const LexOptions &options) {
  if (!py::valid_utf8(source))
    throw Error(ErrorCode::kInvalidArgument, "template: not valid UTF-8");
  return Lexer(normalize_newlines(source), options).run();
}

}  // namespace keel::jinja
