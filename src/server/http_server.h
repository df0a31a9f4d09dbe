// An asynchronous HTTP/1.1 server (Boost.Asio + Beast's parser) for many long-lived
// streaming connections: a few I/O threads, a strand per connection, no thread per
// connection. Each connection has a bounded write queue, so a slow reader costs its own
// memory only up to the bound and never delays other connections or the engine.
// Disconnects are seen while a response is pending (a read stays armed) and reported
// through ResponseChannel::on_close, which handlers turn into engine aborts.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/http_types.h"

namespace keel::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  std::uint16_t port = 8000;  // 0: any free port
  int io_threads = 2;
  std::size_t body_limit = 32u << 20;       // bytes of one request body
  std::size_t max_queued_bytes = 4u << 20;  // unsent bytes of one connection
  // Open connections in all; keel serve derives it from the open-files limit
  // (connection_limits.h). Past it, or past the per-client cap (connections from one
  // address), a new connection gets a 503 and is closed.
  std::size_t max_connections = 4096;
  std::size_t max_connections_per_client = 1024;
  std::chrono::milliseconds idle_timeout{75'000};          // keepalive: no request for this long
  std::chrono::milliseconds write_stall_timeout{300'000};  // a client that reads nothing
  std::chrono::milliseconds sse_keepalive{10'000};         // comment on a quiet stream
};

struct HttpCounters {
  std::atomic<std::int64_t> open_connections{0};
  std::atomic<std::int64_t> requests{0};
  std::atomic<std::int64_t> dropped_slow{0};   // closed because their queue overflowed
  std::atomic<std::int64_t> disconnects{0};    // client left before the response ended
  std::atomic<std::int64_t> refused{0};        // connections over the total or per-client cap
  std::atomic<std::int64_t> accept_errors{0};  // accept() failures (EMFILE: backed off)
};

class HttpServer {
 public:
  // `refuse_on_headers` (optional): see HttpHeaderCheck.
  HttpServer(HttpOptions options, HttpHandler handler, HttpHeaderCheck refuse_on_headers = {});
  ~HttpServer();
  HttpServer(const HttpServer &) = delete;
  HttpServer &operator=(const HttpServer &) = delete;

  // Binds and starts the I/O threads. Throws Error(kUnavailable) when it cannot bind.
  void start();
  // Closes the listening socket; open connections keep being served (shutdown drain).
  void stop_accepting();
  // Stops accepting, closes connections and joins the I/O threads.
  void stop();
  std::uint16_t port() const;
  const HttpCounters &counters() const;

  struct Impl;  // public so the connection type in the .cpp can name it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace keel::server
