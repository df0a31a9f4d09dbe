// Typed, field-naming access to a parsed request body. Every failure is an ApiError
// (thrown as ApiErrorException) that names the field, e.g. "max_tokens: must be an integer".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace keel::server {

struct ApiErrorException {
  ApiError error;
};

[[noreturn]] inline void fail_field(const std::string &field, const std::string &reason) {
  throw ApiErrorException{bad_field(field, reason)};
}

// Parses a request body: checks UTF-8 first (so the message says so), then JSON, and
// requires an object.
nlohmann::ordered_json parse_body(std::string_view body);
bool valid_utf8(std::string_view s);

std::optional<double> opt_number(const nlohmann::ordered_json &obj, const char *field, double lo,
                                 double hi);
std::optional<std::int64_t> opt_int(const nlohmann::ordered_json &obj, const char *field,
                                    std::int64_t lo, std::int64_t hi);
std::optional<bool> opt_bool(const nlohmann::ordered_json &obj, const char *field);
std::optional<std::string> opt_string(const nlohmann::ordered_json &obj, const char *field);
std::string req_string(const nlohmann::ordered_json &obj, const char *field);

}  // namespace keel::server
