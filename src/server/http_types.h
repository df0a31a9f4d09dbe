// The HTTP layer's view of a request and of the response being sent for it, free of
// Asio/Beast types so that handlers and their tests need neither.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace keel::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // target without the query
  std::string query;   // after '?', or empty
  HeaderList headers;  // names lower-cased
  std::string body;
  // Set when the request could not be read whole (the body was over the limit, say):
  // the handler renders it as an error in the endpoint's own format.
  int transport_status = 0;
  std::string transport_error;
  // Answered on its headers alone (HttpHeaderCheck refused it): the body was never read,
  // and the connection closes after the response.
  bool body_unread = false;

  std::string_view header(std::string_view lower_name) const {
    for (const auto &[k, v] : headers)
      if (k == lower_name) return v;
    return {};
  }
};

// One in-flight response. Thread-safe: any thread may call it; the work happens on the
// connection's strand. Calls after the response ended, or after the client left, are
// ignored.
class ResponseChannel {
 public:
  virtual ~ResponseChannel() = default;
  // A whole response with Content-Length.
  virtual void send(int status, std::string content_type, std::string body,
                    HeaderList extra = {}) = 0;
  // Starts a Server-Sent Events stream (200, chunked). While it is open and quiet, the
  // server writes SSE comments as keepalives.
  virtual void begin_sse(HeaderList extra = {}) = 0;
  // Queues bytes of the stream. Returns false once the client is gone or has fallen so
  // far behind that its bounded queue overflowed (then the connection is closed).
  virtual bool write(std::string data) = 0;
  virtual void end() = 0;
  // `fn` runs once, on some thread, if the client disconnects (or is dropped as too
  // slow) before the response ended. Registered after that happened, it runs at once.
  virtual void on_close(std::function<void()> fn) = 0;
  virtual bool closed() const = 0;
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<ResponseChannel>)>;
// Run on a request's headers before its body is read (the request holds no body yet):
// true hands the request to the handler at once, body unread, to be refused (a wrong
// Host, Origin, Content-Type or API key costs no read of a body up to the limit).
using HttpHeaderCheck = std::function<bool(const HttpRequest &)>;

const char *http_reason(int status);

}  // namespace keel::server
