#include "grammar/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace keel::grammar {

std::string python_float_repr(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  // Shortest round-trip digits and their decimal exponent, from to_chars' scientific form.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::string out;
  std::size_t i = 0;
  if (sci[0] == '-') {
    out += '-';
    i = 1;
  }
  const std::size_t e = sci.find('e');
  std::string digits;
  for (std::size_t k = i; k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  const int exp = std::stoi(sci.substr(e + 1));
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(std::size_t(-exp - 1), '0') + digits;
    } else if (std::size_t(exp) + 1 >= digits.size()) {
      out += digits + std::string(std::size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, std::size_t(exp) + 1) + "." + digits.substr(std::size_t(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + ebuf;
}

namespace {

void dump_string(const std::string &s, std::string &out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

void dump(const nlohmann::ordered_json &v, std::string &out) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      out += "null";
      break;
    case nlohmann::json::value_t::boolean:
      out += v.get<bool>() ? "true" : "false";
      break;
    case nlohmann::json::value_t::number_integer:
      out += std::to_string(v.get<std::int64_t>());
      break;
    case nlohmann::json::value_t::number_unsigned:
      out += std::to_string(v.get<std::uint64_t>());
      break;
    case nlohmann::json::value_t::number_float:
      out += python_float_repr(v.get<double>());
      break;
    case nlohmann::json::value_t::string:
      dump_string(v.get_ref<const std::string &>(), out);
      break;
    case nlohmann::json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto &x : v) {
        if (!first) out += ", ";
        first = false;
        dump(x, out);
      }
      out += ']';
      break;
    }
    case nlohmann::json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        dump_string(it.key(), out);
        out += ": ";
        dump(it.value(), out);
      }
      out += '}';
      break;
    }
    default:
      out += "null";
      break;
  }
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json &value) {
  std::string out;
  dump(value, out);
  return out;
}

}  // namespace keel::grammar
