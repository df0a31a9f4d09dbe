#include "server/json_fields.h"

#include <cmath>

namespace keel::server {

using json = nlohmann::ordered_json;

bool valid_utf8(std::string_view s) {
  std::size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    std::size_t len;
    std::uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (std::size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += len;
  }
  return true;
}

json parse_body(std::string_view body) {
  if (!valid_utf8(body)) fail_field("body", "request body is not valid UTF-8");
  JsonParseFailure failure;
  auto j = parse_bounded_json<json>(body, request_json_limits(), &failure);
  if (!j) {
    const std::string &what = failure.message;
    if (failure.kind == JsonParseFailure::Kind::kLimit)
      fail_field("body", "request JSON is over a limit: " + what);
    if (what.find("UTF-8") != std::string::npos || what.find("surrogate") != std::string::npos)
      fail_field("body", "request body holds invalid UTF-8 (" + what + ")");
    fail_field("body", "malformed JSON: " + what);
  }
  if (!j->is_object()) fail_field("body", "must be a JSON object");
  return std::move(*j);
}

std::optional<double> opt_number(const json &obj, const char *field, double lo, double hi) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) fail_field(field, "must be a number");
  double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    fail_field(field, "must be between " + json(lo).dump() + " and " + json(hi).dump());
  return v;
}

std::optional<std::int64_t> opt_int(const json &obj, const char *field, std::int64_t lo,
                                    std::int64_t hi) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    // Accept 16.0, reject 16.5 and strings.
    if (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>() &&
        std::fabs(it->get<double>()) < 9e15) {
      auto v = static_cast<std::int64_t>(it->get<double>());
      if (v < lo || v > hi)
        fail_field(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
      return v;
    }
    fail_field(field, "must be an integer");
  }
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    fail_field(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  auto v = it->get<std::int64_t>();
  if (v < lo || v > hi)
    fail_field(field, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return v;
}

std::optional<bool> opt_bool(const json &obj, const char *field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) fail_field(field, "must be a boolean");
  return it->get<bool>();
}

std::optional<std::string> opt_string(const json &obj, const char *field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail_field(field, "must be a string");
  return it->get<std::string>();
}

std::string req_string(const json &obj, const char *field) {
  auto v = opt_string(obj, field);
  if (!v) fail_field(field, "is required");
  return *v;
}

}  // namespace keel::server
