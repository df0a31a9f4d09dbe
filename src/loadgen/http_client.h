// One blocking, bounded HTTP request: the benchmark's checks before a run (is the
// server there, does it serve the model, does it take token-id prompts).
#pragma once

#include <chrono>
#include <string>

#include "loadgen/endpoint.h"

namespace keel::loadgen {

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET when body is empty, POST (JSON) otherwise. Throws keel::Error (kUnavailable) when
// the server cannot be reached or does not answer within timeout.
HttpResponse http_request(const Endpoint &ep, const std::string &path, const std::string &body,
                          const std::string &api_key, std::chrono::milliseconds timeout);

}  // namespace keel::loadgen
