#include "loadgen/http_client.h"

#include "core/error.h"
#include "loadgen/beast_io.h"

namespace keel::loadgen {

HttpResponse http_request(const Endpoint &ep, const std::string &path, const std::string &body,
                          const std::string &api_key, std::chrono::milliseconds timeout) {
  net::io_context io;
  HttpResponse out;
  boost::system::error_code failure;
  const char *stage = "resolve";
  auto task = [&]() -> net::awaitable<void> {
    boost::system::error_code ec;
    tcp::resolver resolver(io);
    auto eps = co_await resolver.async_resolve(ep.host, ep.port,
                                               net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      failure = ec;
      co_return;
    }
    beast::tcp_stream stream(io);
    stream.expires_after(timeout);
    stage = "connect";
    co_await stream.async_connect(eps, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      failure = ec;
      co_return;
    }
    stage = "send";
    auto req =
        make_request(ep, body.empty() ? http::verb::get : http::verb::post, path, body, api_key);
    co_await http::async_write(stream, req, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      failure = ec;
      co_return;
    }
    stage = "read";
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    co_await http::async_read(stream, buf, parser, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      failure = ec;
      co_return;
    }
    out.status = static_cast<int>(parser.get().result_int());
    out.body = std::move(parser.get().body());
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  };
  net::co_spawn(io, task(), net::detached);
  // The stream's expiry bounds connect, send and read; this bounds the resolve too.
  io.run_for(timeout + std::chrono::seconds(1));
  if (!io.stopped()) failure = net::error::timed_out;
  if (failure)
    throw Error(ErrorCode::kUnavailable,
                "cannot reach " + ep.host_port() + " (" + stage + "): " + failure.message());
  return out;
}

}  // namespace keel::loadgen
