// Cross-site protection, on whether or not an API key is set: a web page in the user's
// browser must not be able to drive the server (load models, generate, clear the cache)
// or read from it through DNS rebinding.
//  - Host must name this server: an IP literal (v4 or [v6]), localhost (or a name under
//    .localhost), the bind address, this machine's host name, or a name listed in
//    --allowed-hosts ("*": any). Else 421: a rebinding page sends its own name.
//  - Origin, when sent (browsers send it on every cross-origin request and every POST),
//    must be the server's own (its authority equal to the Host header) or one listed in
//    --allowed-origins ("*": any). Else 403. "null" (sandboxed frames) is refused.
//  - A request that carries a body (or announces one) must say Content-Type: application/json; else
//  415. The
//    media types a page may send without a CORS preflight (text/plain, forms) are so
//    refused even where an old browser leaves out Origin.
// A request that no browser sends (curl, SDKs: no Origin, an IP or localhost Host)
// passes untouched, so clients need nothing new.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/http_types.h"

namespace keel::server {

struct RequestGuardOptions {
  std::vector<std::string> allowed_origins;  // "scheme://host[:port]", or "*"
  std::vector<std::string> allowed_hosts;    // host names without port, or "*"
  std::string bind_host;                     // --host
  std::string machine_name;                  // gethostname(); empty: none
};

class RequestGuard {
 public:
  explicit RequestGuard(RequestGuardOptions options);
  // The refusal (421, 403 or 415 with its reason), or nullopt when `req` may pass.
  std::optional<ApiError> check(const HttpRequest &req) const;

 private:
  bool host_allowed(std::string_view host_header) const;
  bool origin_allowed(std::string_view origin, std::string_view host_header) const;

  RequestGuardOptions opt_;
  bool any_host_ = false, any_origin_ = false;
};

// "example.com:8000" -> "example.com", "[::1]:80" -> "::1" (lower-cased; no port check).
std::string host_of_authority(std::string_view authority);
// A body read, or one its headers announce (Content-Length > 0, Transfer-Encoding), so
// the check holds on headers alone, before the body is read.
bool carries_body(const HttpRequest &req);
// "text/plain; charset=utf-8" is text/plain: the media type, lower-cased and trimmed.
std::string media_type_of(std::string_view content_type);

}  // namespace keel::server
