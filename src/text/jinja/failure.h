// The exception the interpreter throws inside itself. The evaluator stamps it with the
// template line of the innermost node that failed; Template turns it into keel::Error.
#pragma once

#include <stdexcept>
#include <string>

#include "core/error.h"

namespace keel::jinja {

class Failure : public std::runtime_error {
 public:
  Failure(ErrorCode code, const std::string &message) : std::runtime_error(message), code(code) {}
  ErrorCode code;
  int line = 0;  // 0: not located yet
  int column = 0;
  bool raised = false;  // from the template's own raise_exception()
};

// A TypeError / ValueError-like failure of the template's own logic.
[[noreturn]] inline void fail(const std::string &message) {
  throw Failure(ErrorCode::kInvalidArgument, message);
}
// A construct or builtin keel does not implement.
[[noreturn]] inline void unsupported(const std::string &message) {
  throw Failure(ErrorCode::kUnsupported, message);
}

}  // namespace keel::jinja
