// The server a benchmark talks to, from a base URL such as http://127.0.0.1:8000 or
// http://host:8000/v1 (a trailing /v1 is the OpenAI SDKs' convention and is dropped).
#pragma once

#include <string>

namespace keel::loadgen {

struct Endpoint {
  std::string host;
  std::string port;
  std::string base_path;  // without a trailing slash, e.g. "" or "/proxy"

  std::string path(const std::string &suffix) const { return base_path + suffix; }
  std::string host_port() const { return host + ":" + port; }
};

// Throws keel::Error (kInvalidArgument) on a URL that is not plain http://host[:port][/path].
Endpoint parse_base_url(const std::string &url);

}  // namespace keel::loadgen
