// An error bound for an API client: HTTP status, a machine type, the offending field.
// Rendered in the endpoint's own format (OpenAI or Anthropic) by the wire layers.
#pragma once

#include <string>

#include "core/error.h"

namespace keel::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // the request field at fault, or empty
};

// Maps a keel::Error to its HTTP status (kInvalidArgument 400, kNotFound 404,
// kResourceExhausted 507, kUnavailable 503, kTimeout 504, ...).
ApiError api_error_from(const Error &e);
ApiError bad_field(const std::string &param, const std::string &reason);

// {"error":{"message","type","param","code"}}
std::string render_openai_error(const ApiError &e);
// {"type":"error","error":{"type","message"}}
std::string render_anthropic_error(const ApiError &e);
std::string anthropic_error_type(int status);

}  // namespace keel::server
