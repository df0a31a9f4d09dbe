#include "text/json_args_stream.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

namespace keel {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool number_byte(char c) {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string JsonArgsStream::take_new() {
  std::string s = out_.substr(taken_);
  taken_ = out_.size();
  return s;
}

void JsonArgsStream::flush_number() {
  if (number_.empty()) return;
  // One scalar parsed and written back as the whole value's dump writes it.
  const auto j = nlohmann::json::parse(number_, nullptr, false);
  out_ += j.is_number() ? j.dump() : number_;
  number_.clear();
}

// A decoded code point inside a string, written as dump writes it (ensure_ascii off).
void JsonArgsStream::put_code_point(unsigned cp) {
  switch (cp) {
    case '"':
      out_ += "\\\"";
      return;
    case '\\':
      out_ += "\\\\";
      return;
    case '\b':
      out_ += "\\b";
      return;
    case '\f':
      out_ += "\\f";
      return;
    case '\n':
      out_ += "\\n";
      return;
    case '\r':
      out_ += "\\r";
      return;
    case '\t':
      out_ += "\\t";
      return;
    default:
      break;
  }
  if (cp < 0x20) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", cp);
    out_ += buf;
  } else if (cp < 0x80) {
    out_ += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out_ += static_cast<char>(0xC0 | (cp >> 6));
    out_ += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out_ += static_cast<char>(0xE0 | (cp >> 12));
    out_ += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out_ += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out_ += static_cast<char>(0xF0 | (cp >> 18));
    out_ += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out_ += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out_ += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The bytes of one escape after its backslash; settles it once complete.
void JsonArgsStream::escape_char(char c) {
  escape_ += c;
  if (escape_[0] != 'u') {
    in_escape_ = false;
    const char e = escape_[0];
    escape_.clear();
    switch (e) {
      case '"':
        put_code_point('"');
        return;
      case '\\':
        put_code_point('\\');
        return;
      case '/':
        put_code_point('/');
        return;
      case 'b':
        put_code_point('\b');
        return;
      case 'f':
        put_code_point('\f');
        return;
      case 'n':
        put_code_point('\n');
        return;
      case 'r':
        put_code_point('\r');
        return;
      case 't':
        put_code_point('\t');
        return;
      default:  // invalid: as written
        out_ += '\\';
        out_ += e;
        return;
    }
  }
  if (escape_.size() == 1 || (escape_.size() < 5 && hex_value(c) >= 0)) return;
  in_escape_ = false;
  unsigned cp = 0;
  bool ok = escape_.size() == 5;
  for (std::size_t i = 1; ok && i < 5; ++i)
    cp = cp * 16 + static_cast<unsigned>(hex_value(escape_[i]));
  if (!ok) {  // invalid: as written
    out_ += '\\';
    out_ += escape_;
    escape_.clear();
    return;
  }
  escape_.clear();
  if (cp >= 0xD800 && cp < 0xDC00) {
    if (high_surrogate_) {  // two high halves: invalid, the first as written
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\u%04x", high_surrogate_);
      out_ += buf;
    }
    high_surrogate_ = cp;
    return;
  }
  if (cp >= 0xDC00 && cp < 0xE000 && high_surrogate_) {
    put_code_point(0x10000 + ((high_surrogate_ - 0xD800) << 10) + (cp - 0xDC00));
    high_surrogate_ = 0;
    return;
  }
  put_code_point(cp);
}

std::size_t JsonArgsStream::feed(std::string_view bytes) {
  std::size_t i = 0;
  for (; i < bytes.size() && !done_; ++i) {
    const char c = bytes[i];
    if (in_string_) {
      if (in_escape_) {
        escape_char(c);
        continue;
      }
      if (high_surrogate_ && c != '\\') {  // a lone high half: invalid, as written
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\u%04x", high_surrogate_);
        out_ += buf;
        high_surrogate_ = 0;
      }
      if (c == '\\') {
        in_escape_ = true;
      } else {
        if (c == '"') in_string_ = false;
        out_ += c;
      }
      continue;
    }
    if (!number_.empty() && number_byte(c)) {
      number_ += c;
      continue;
    }
    flush_number();
    if (is_ws(c)) continue;
    if (c == '-' || (c >= '0' && c <= '9')) {
      number_ += c;
      continue;
    }
    out_ += c;
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (--depth_ <= 0) done_ = true;
    }
  }
  return i;
}

}  // namespace keel
