// A small JSON Schema validator for the features the grammar supports, used to check
// generated documents independently of the grammar.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "text/utf8.h"

namespace keel::grammar::test {

using ojson = nlohmann::ordered_json;

inline std::size_t code_points(const std::string &s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Empty when `v` validates against `s`; else what failed.
inline std::string validate(const ojson &root, const ojson &s, const ojson &v) {
  if (s.is_boolean()) return s.get<bool>() ? "" : "false schema";
  if (s.contains("$ref")) {
    std::string ref = s["$ref"];
    return validate(root, ref == "#" ? root : root[ojson::json_pointer(ref.substr(1))], v);
  }
  if (s.contains("const") && s["const"] != v) return "const";
  if (s.contains("enum")) {
    bool found = false;
    for (const auto &e : s["enum"]) found |= e == v;
    if (!found) return "enum";
  }
  if (s.contains("anyOf")) {
    for (const auto &sub : s["anyOf"])
      if (validate(root, sub, v).empty()) return "";
    return "anyOf";
  }
  if (s.contains("type")) {
    auto is = [&](const std::string &t) {
      if (t == "object") return v.is_object();
      if (t == "array") return v.is_array();
      if (t == "string") return v.is_string();
      // Integers past 64 bits parse as doubles: a number with no fraction is an integer.
      if (t == "integer")
        return v.is_number_integer() ||
               (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
      if (t == "number") return v.is_number();
      if (t == "boolean") return v.is_boolean();
      if (t == "null") return v.is_null();
      return false;
    };
    bool ok = false;
    if (s["type"].is_string())
      ok = is(s["type"]);
    else
      for (const auto &t : s["type"]) ok |= is(t);
    if (!ok) return "type";
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const auto &r : s["required"])
        if (!v.contains(r.get<std::string>())) return "required " + r.get<std::string>();
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (s.contains("properties") && s["properties"].contains(it.key())) {
        auto e = validate(root, s["properties"][it.key()], it.value());
        if (!e.empty()) return it.key() + ": " + e;
      } else if (s.contains("additionalProperties")) {
        auto e = validate(root, s["additionalProperties"], it.value());
        if (!e.empty()) return "additional " + it.key() + ": " + e;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<std::size_t>()) return "minItems";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<std::size_t>()) return "maxItems";
    if (s.contains("items"))
      for (const auto &x : v) {
        auto e = validate(root, s["items"], x);
        if (!e.empty()) return "item: " + e;
      }
  }
  if (v.is_string()) {
    const std::string str = v;
    if (s.contains("minLength") && code_points(str) < s["minLength"].get<std::size_t>())
      return "minLength";
    if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<std::size_t>())
      return "maxLength";
    if (s.contains("pattern") &&
        !std::regex_search(str, std::regex(s["pattern"].get<std::string>())))
      return "pattern";
  }
  if (v.is_number()) {
    if (s.contains("minimum") && v.get<double>() < s["minimum"].get<double>()) return "minimum";
    if (s.contains("maximum") && v.get<double>() > s["maximum"].get<double>()) return "maximum";
  }
  return "";
}

}  // namespace keel::grammar::test
