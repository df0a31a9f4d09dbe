#include "server/request_guard.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>

namespace keel::server {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool ip_literal(const std::string &host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// An authority without its scheme's default port: "a.com:80" under http is "a.com".
std::string without_default_port(std::string authority, std::string_view scheme) {
  const std::string_view port = scheme == "https" ? ":443" : ":80";
  if (ends_with(authority, port)) authority.resize(authority.size() - port.size());
  return authority;
}

// A printable, bounded copy of a header value for an error message.
std::string shown(std::string_view v) {
  std::string out;
  for (char c : v.substr(0, 200))
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  return out;
}

}  // namespace

std::string host_of_authority(std::string_view authority) {
  authority = trim(authority);
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return lower(authority);
    return lower(authority.substr(1, close - 1));
  }
  const auto colon = authority.find(':');
  std::string host = lower(authority.substr(0, colon));
  if (!host.empty() && host.back() == '.') host.pop_back();  // "localhost." is localhost
  return host;
}

std::string media_type_of(std::string_view content_type) {
  return lower(trim(content_type.substr(0, content_type.find(';'))));
}

RequestGuard::RequestGuard(RequestGuardOptions options) : opt_(std::move(options)) {
  for (auto &h : opt_.allowed_hosts) {
    h = host_of_authority(h);
    if (h == "*") any_host_ = true;
  }
  for (auto &o : opt_.allowed_origins) {
    o = lower(trim(o));
    while (!o.empty() && o.back() == '/') o.pop_back();
    if (o == "*") any_origin_ = true;
  }
  opt_.bind_host = host_of_authority(opt_.bind_host);
  opt_.machine_name = lower(opt_.machine_name);
}

bool RequestGuard::host_allowed(std::string_view host_header) const {
  if (any_host_ || trim(host_header).empty()) return true;  // no Host: not a browser
  const std::string host = host_of_authority(host_header);
  if (host.empty()) return false;
  if (ip_literal(host) || host == "localhost" || ends_with(host, ".localhost")) return true;
  if (host == opt_.bind_host) return true;
  if (!opt_.machine_name.empty() && host == opt_.machine_name) return true;
  return std::find(opt_.allowed_hosts.begin(), opt_.allowed_hosts.end(), host) !=
         opt_.allowed_hosts.end();
}

bool RequestGuard::origin_allowed(std::string_view origin_header,
                                  std::string_view host_header) const {
  if (any_origin_) return true;
  std::string origin = lower(trim(origin_header));
  while (!origin.empty() && origin.back() == '/') origin.pop_back();
  if (std::find(opt_.allowed_origins.begin(), opt_.allowed_origins.end(), origin) !=
      opt_.allowed_origins.end())
    return true;
  const auto sep = origin.find("://");
  if (sep == std::string::npos) return false;  // "null" and the like
  const std::string scheme = origin.substr(0, sep);
  const std::string authority = origin.substr(sep + 3);
  if (authority.empty() || authority.find('/') != std::string::npos) return false;
  // The server's own page: the origin names the host the request was sent to.
  return without_default_port(authority, scheme) ==
         without_default_port(lower(trim(host_header)), scheme);
}

bool carries_body(const HttpRequest &req) {
  if (!req.body.empty() || !req.header("transfer-encoding").empty()) return true;
  const std::string_view length = trim(req.header("content-length"));
  return !length.empty() && length.find_first_not_of('0') != std::string_view::npos;
}

std::optional<ApiError> RequestGuard::check(const HttpRequest &req) const {
  const std::string_view host = req.header("host");
  if (!host_allowed(host))
    return ApiError{421,
                    "Host: '" + shown(host) +
                        "' does not name this server (an IP address, localhost, the bind address "
                        "or a name given to --allowed-hosts)",
                    ""};
  bool has_origin = false;
  for (const auto &[k, v] : req.headers)
    if (k == "origin") has_origin = true;
  const std::string_view origin = req.header("origin");
  if (has_origin && !origin_allowed(origin, host))
    return ApiError{403,
                    "Origin: '" + shown(origin) +
                        "' is not this server's own page nor one given to --allowed-origins",
                    ""};
  if (carries_body(req)) {
    const std::string type = media_type_of(req.header("content-type"));
    if (type != "application/json")
      return ApiError{415,
                      "Content-Type: a request body must be application/json (got '" +
                          shown(type.empty() ? "none" : type) +
                          "'; with curl add -H 'content-type: application/json')",
                      ""};
  }
  return std::nullopt;
}

}  // namespace keel::server
