#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace keel::server {

using json = nlohmann::ordered_json;

ApiError api_error_from(const Error &e) {
  int status = 500;
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
      status = 400;
      break;
    case ErrorCode::kNotFound:
      status = 404;
      break;
    case ErrorCode::kFormat:
      status = 500;
      break;
    case ErrorCode::kUnsupported:
      status = 400;
      break;
    case ErrorCode::kResourceExhausted:
      status = 507;
      break;
    case ErrorCode::kTimeout:
      status = 504;
      break;
    case ErrorCode::kCancelled:
      status = 499;
      break;
    case ErrorCode::kUnavailable:
      status = 503;
      break;
    case ErrorCode::kInternal:
      status = 500;
      break;
  }
  return {status, e.what(), ""};
}

ApiError bad_field(const std::string &param, const std::string &reason) {
  return {400, param + ": " + reason, param};
}

namespace {
std::string openai_type(int status) {
  if (status == 401) return "authentication_error";
  if (status == 404) return "not_found_error";
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}
}  // namespace

std::string anthropic_error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string render_openai_error(const ApiError &e) {
  json j{{"error",
          {{"message", e.message},
           {"type", openai_type(e.status)},
           {"param", e.param.empty() ? json(nullptr) : json(e.param)},
           {"code", json(nullptr)}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string render_anthropic_error(const ApiError &e) {
  json j{{"type", "error"},
         {"error", {{"type", anthropic_error_type(e.status)}, {"message", e.message}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace keel::server
