// Error type for every module: a code the API layer maps to a status, and a message
// that names the file, field or resource and the reason.
#pragma once

#include <stdexcept>
#include <string>

namespace keel {

enum class ErrorCode {
  kInvalidArgument,   // bad input from a caller (maps to HTTP 400)
  kNotFound,          // unknown model, file or id (404)
  kFormat,            // a file that is truncated, lies or is not what it claims
  kUnsupported,       // valid input that keel does not handle (yet)
  kResourceExhausted, // memory, KV blocks or disk ran out (507 / 503)
  kTimeout,           // a bounded wait passed its deadline
  kCancelled,         // aborted by the caller
  kUnavailable,       // an engine is dead, stalled or restarting (503)
  kInternal,          // a broken invariant inside keel
};

const char *error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string &message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

// Throws Error(kInternal) naming the failed condition: for invariants, not input checks.
#define KEEL_CHECK(cond)                                                          \
  do {                                                                            \
    if (!(cond))                                                                  \
      throw ::keel::Error(::keel::ErrorCode::kInternal,                           \
                          std::string("check failed: " #cond " at ") + __FILE__ + \
                              ":" + std::to_string(__LINE__));                    \
  } while (0)

}  // namespace keel
