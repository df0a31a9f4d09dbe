#include "loadgen/endpoint.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace keel::loadgen {

Endpoint parse_base_url(const std::string &url) {
  auto bad = [&](const std::string &why) {
    throw Error(ErrorCode::kInvalidArgument, "--base-url '" + url + "': " + why);
  };
  constexpr std::string_view kScheme = "http://";
  if (url.rfind("https://", 0) == 0) bad("https is not supported; use http:// (a local server)");
  if (url.rfind(kScheme, 0) != 0) bad("must start with http://");
  std::string rest = url.substr(kScheme.size());
  Endpoint e;
  const std::size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  e.base_path = slash == std::string::npos ? "" : rest.substr(slash);
  while (!e.base_path.empty() && e.base_path.back() == '/') e.base_path.pop_back();
  if (e.base_path.size() >= 3 && e.base_path.compare(e.base_path.size() - 3, 3, "/v1") == 0)
    e.base_path.resize(e.base_path.size() - 3);
  if (authority.empty()) bad("no host");
  if (authority.front() == '[') {  // [::1]:port
    const std::size_t close = authority.find(']');
    if (close == std::string::npos) bad("unclosed [");
    e.host = authority.substr(1, close - 1);
    authority = authority.substr(close + 1);
    if (!authority.empty() && authority.front() != ':') bad("junk after ]");
    e.port = authority.empty() ? "80" : authority.substr(1);
  } else {
    const std::size_t colon = authority.rfind(':');
    e.host = authority.substr(0, colon);
    e.port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  }
  if (e.host.empty()) bad("no host");
  if (e.port.empty() || e.port.size() > 5 ||
      !std::all_of(e.port.begin(), e.port.end(), [](unsigned char c) { return std::isdigit(c); }) ||
      std::stoi(e.port) < 1 || std::stoi(e.port) > 65535)
    bad("bad port '" + e.port + "'");
  return e;
}

}  // namespace keel::loadgen
