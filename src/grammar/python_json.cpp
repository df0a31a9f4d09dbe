#include "grammar/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/python_float.h"

namespace keel::grammar {

std::string python_float_repr(double x) { return python_json_float(x); }

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
