// Typed, field-naming access to a parsed request body. Every failure is an ApiError
// (thrown as ApiErrorException) that names the field, e.g. "max_tokens: must be an integer".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/bounded_json.h"
#include "server/api_error.h"

namespace keel::server {

struct ApiErrorException {
  ApiError error;
};

[[noreturn]] inline void fail_field(const std::string &field, const std::string &reason) {
  throw ApiErrorException{bad_field(field, reason)};
}

// The limits every request body is parsed under (core/bounded_json.h): 128 levels of
// nesting (the APIs need under 10; a tool schema a few dozen), 4,096 keys an object,
// 2^20 items an array, 16 MiB a string. Past one, the request is a 400 naming it.
inline JsonLimits request_json_limits() { return {}; }

// Parses a request body: checks UTF-8 first (so the message says so), then JSON under
// request_json_limits(), and requires an object.
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
