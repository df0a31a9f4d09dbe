// Boost.Beast pieces shared by the benchmark's client code (internal to loadgen).
#pragma once

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
// clang-format on
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <string>

#include "loadgen/endpoint.h"

namespace keel::loadgen {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

inline http::request<http::string_body> make_request(const Endpoint &ep, http::verb method,
                                                     const std::string &suffix, std::string body,
                                                     const std::string &api_key) {
  http::request<http::string_body> req{method, ep.path(suffix), 11};
  req.set(http::field::host, ep.host_port());
  req.set(http::field::user_agent, "keel-bench");
  req.set(http::field::accept, "application/json, text/event-stream");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (method == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = std::move(body);
  }
  req.keep_alive(true);
  req.prepare_payload();
  return req;
}

}  // namespace keel::loadgen
