#include "server/http_server.h"

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <future>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

#include "core/error.h"

namespace keel::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

const char *http_reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 421:
      return "Misdirected Request";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 507:
      return "Insufficient Storage";
    default:
      return "Unknown";
  }
}

namespace {

std::string chunk(std::string_view data) {
  char head[20];
  int n = std::snprintf(head, sizeof head, "%zx\r\n", data.size());
  std::string out;
  out.reserve(n + data.size() + 2);
  out.append(head, n).append(data).append("\r\n");
  return out;
}

}  // namespace

class Session;

struct HttpServer::Impl {
  HttpOptions opt;
  HttpHandler handler;
  HttpHeaderCheck refuse_on_headers;  // may be empty
  HttpCounters counters;
  // Open connections per client address (sessions release theirs as they end, possibly
  // while ioc is destroyed: declared before it).
  std::mutex clients_mu;
  std::unordered_map<std::string, std::size_t> clients;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::uint16_t bound_port = 0;
  net::steady_timer accept_retry{ioc};
  std::chrono::milliseconds accept_backoff{0};

  void accept();
  // Counts `socket` against the caps and starts its session, or refuses it.
  void admit(tcp::socket socket);
  void release_client(const std::string &key);
};

// The per-request handle given to handlers. It only posts to the session's strand; the
// session ignores calls of an older request (gen) or after the client left.
class Channel : public ResponseChannel {
 public:
  Channel(std::weak_ptr<Session> s, std::uint64_t gen, std::size_t limit)
      : session_(std::move(s)), gen_(gen), limit_(limit) {}
  void send(int status, std::string content_type, std::string body, HeaderList extra) override;
  void begin_sse(HeaderList extra) override;
  bool write(std::string data) override;
  void end() override;
  void on_close(std::function<void()> fn) override;
  bool closed() const override { return closed_.load(); }

  // Session side (on its strand).
  void mark_closed_and_fire() {
    std::vector<std::function<void()>> cbs;
    {
      std::lock_guard lock(mu_);
      if (fired_) return;
      fired_ = true;
      closed_ = true;
      cbs.swap(close_cbs_);
    }
    for (auto &f : cbs) f();
  }
  void mark_done() {
    std::lock_guard lock(mu_);
    fired_ = true;  // the response ended: a later disconnect is not an abort
    close_cbs_.clear();
    closed_ = true;
  }
  std::atomic<std::size_t> pending{0};

 private:
  template <typename F>
  void post(F &&f);

  std::weak_ptr<Session> session_;
  std::uint64_t gen_;
  std::size_t limit_;
  std::atomic<bool> closed_{false};
  std::mutex mu_;
  bool fired_ = false;
  std::vector<std::function<void()>> close_cbs_;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `client` is already counted in srv.clients; the session releases it.
  Session(tcp::socket socket, HttpServer::Impl &srv, std::string client)
      : socket_(std::move(socket)),
        srv_(srv),
        client_(std::move(client)),
        timer_(socket_.get_executor()),
        ka_timer_(socket_.get_executor()) {
    srv_.counters.open_connections++;
  }
  ~Session() {
    srv_.counters.open_connections--;
    srv_.release_client(client_);
  }

  void start() {
    error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    net::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read_request(); });
  }

  net::any_io_executor executor() { return socket_.get_executor(); }
  std::uint64_t gen() const { return gen_; }

  void do_send(std::uint64_t gen, int status, const std::string &ctype, std::string body,
               const HeaderList &extra) {
    if (gen != gen_ || state_ != State::kHandling) return;
    std::string head = status_line(status);
    head += "Content-Type: " + ctype + "\r\n";
    head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    for (const auto &[k, v] : extra) head += k + ": " + v + "\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    state_ = State::kDone;
    channel_->mark_done();
    queue(std::move(head) + body, body.size());
  }

  void do_begin_sse(std::uint64_t gen, const HeaderList &extra) {
    if (gen != gen_ || state_ != State::kHandling) return;
    std::string head = status_line(200);
    head +=
        "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: "
        "chunked\r\n";
    for (const auto &[k, v] : extra) head += k + ": " + v + "\r\n";
    head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    state_ = State::kStreaming;
    queue(std::move(head), 0);
    arm_keepalive();
  }

  void do_write(std::uint64_t gen, std::string data) {
    if (gen != gen_ || state_ != State::kStreaming) {
      // Not ours to write any more: release the bytes the channel counted.
      if (gen == gen_ && channel_) channel_->pending -= data.size();
      return;
    }
    const std::size_t n = data.size();
    wrote_since_tick_ = true;
    queue(chunk(data), n);
  }

  void do_end(std::uint64_t gen) {
    if (gen != gen_ || state_ != State::kStreaming) return;
    state_ = State::kDone;
    channel_->mark_done();
    ka_timer_.cancel();
    queue("0\r\n\r\n", 0);
  }

  // The client is gone or too slow: fire the close callbacks and drop the connection.
  void client_gone() {
    if (state_ == State::kClosed) return;
    if (state_ == State::kHandling || state_ == State::kStreaming) {
      srv_.counters.disconnects++;
      if (channel_) channel_->mark_closed_and_fire();
    }
    close();
  }

 private:
  enum class State { kReading, kHandling, kStreaming, kDone, kClosed };

  std::string status_line(int status) {
    return "HTTP/1.1 " + std::to_string(status) + " " + http_reason(status) + "\r\n";
  }

  void arm_timer(std::chrono::milliseconds d) {
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), g = ++timer_gen_](error_code ec) {
      if (ec || g != self->timer_gen_) return;
      if (self->state_ == State::kReading) {
        self->close();
      } else {
        self->srv_.counters.dropped_slow++;
        self->client_gone();
      }
    });
  }
  void disarm_timer() {
    ++timer_gen_;
    timer_.cancel();
  }

  void arm_keepalive() {
    ka_timer_.expires_after(srv_.opt.sse_keepalive);
    ka_timer_.async_wait([self = shared_from_this(), g = gen_](error_code ec) {
      if (ec || g != self->gen_ || self->state_ != State::kStreaming) return;
      if (!self->wrote_since_tick_) self->queue(chunk(": keepalive\n\n"), 0);
      self->wrote_since_tick_ = false;
      self->arm_keepalive();
    });
  }

  void read_request() {
    if (state_ == State::kClosed) return;
    state_ = State::kReading;
    ++gen_;
    channel_.reset();
    parser_.emplace();
    parser_->body_limit(srv_.opt.body_limit);
    parser_->header_limit(64 * 1024);
    arm_timer(srv_.opt.idle_timeout);
    http::async_read_header(
        socket_, buf_, *parser_,
        [self = shared_from_this()](error_code ec, std::size_t) { self->on_header(ec); });
  }

  // A client that sends "Expect: 100-continue" (curl does for bodies over 1 MB) waits for
  // "100 Continue" before its body, else stalls a second: answer it, then read the body.
  void on_header(error_code ec) {
    if (ec || state_ == State::kClosed || parser_->is_done()) {
      on_read(ec);
      return;
    }
    if (srv_.refuse_on_headers) {
      HttpRequest head = request_of(parser_->get());
      if (srv_.refuse_on_headers(head)) {
        // Refused on its headers: answered now, the body never read (nor a 100 Continue
        // sent); the connection closes after the response (linger_close).
        disarm_timer();
        head.body_unread = true;
        keep_alive_ = false;
        dispatch(std::move(head));
        return;
      }
    }
    if (!beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      read_body();
      return;
    }
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(socket_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](error_code ec, std::size_t) {
                       if (ec) {
                         self->close();
                         return;
                       }
                       self->read_body();
                     });
  }

  void read_body() {
    if (state_ == State::kClosed) return;
    http::async_read(
        socket_, buf_, *parser_,
        [self = shared_from_this()](error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(error_code ec) {
    disarm_timer();
    if (state_ == State::kClosed) return;
    HttpRequest req;
    if (ec == http::error::body_limit) {
      req.transport_status = 413;
      req.transport_error = "request body is larger than the limit of " +
                            std::to_string(srv_.opt.body_limit) + " bytes";
    } else if (ec == http::error::end_of_stream || ec == net::error::eof ||
               ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      close();
      return;
    } else if (ec) {
      // A malformed request line or headers: answer plainly and drop the connection.
      keep_alive_ = false;
      state_ = State::kHandling;
      channel_ = std::make_shared<Channel>(weak_from_this(), gen_, srv_.opt.max_queued_bytes);
      do_send(gen_, 400, "application/json",
              R"({"error":{"message":"malformed HTTP request: )" + ec.message() +
                  R"(","type":"invalid_request_error"}})",
              {});
      return;
    }
    const auto &msg = parser_->get();
    HttpRequest head = request_of(msg);
    head.transport_status = req.transport_status;
    head.transport_error = std::move(req.transport_error);
    keep_alive_ = head.transport_status == 0 && msg.keep_alive();
    if (head.transport_status == 0) {
      head.body = std::move(parser_->get().body());
      start_monitor_after_dispatch_ = true;
    }
    dispatch(std::move(head));
  }

  // The method, target and headers (names lower-cased) of a parsed request, no body.
  static HttpRequest request_of(const http::request_parser<http::string_body>::value_type &msg) {
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    const auto q = req.target.find('?');
    req.path = req.target.substr(0, q);
    if (q != std::string::npos) req.query = req.target.substr(q + 1);
    for (const auto &field : msg) {
      std::string name(field.name_string());
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      req.headers.emplace_back(std::move(name), std::string(field.value()));
    }
    return req;
  }

  void dispatch(HttpRequest req) {
    state_ = State::kHandling;
    channel_ = std::make_shared<Channel>(weak_from_this(), gen_, srv_.opt.max_queued_bytes);
    srv_.counters.requests++;
    if (std::exchange(start_monitor_after_dispatch_, false)) start_monitor();
    try {
      srv_.handler(std::move(req), channel_);
    } catch (const std::exception &e) {
      do_send(gen_, 500, "application/json",
              R"({"error":{"message":"internal error","type":"server_error"}})", {});
    }
  }

  // Keeps a read armed while a response is pending, to see the client leave.
  void start_monitor() {
    if (monitoring_ || state_ == State::kClosed) return;
    monitoring_ = true;
    socket_.async_read_some(
        buf_.prepare(4096), [self = shared_from_this()](error_code ec, std::size_t n) {
          self->monitoring_ = false;
          if (!ec) self->buf_.commit(n);
          if (self->resume_after_monitor_) {
            self->resume_after_monitor_ = false;
            if (!ec || ec == net::error::operation_aborted) {
              self->read_request();
              return;
            }
          }
          if (ec == net::error::operation_aborted) return;
          if (ec) {
            self->client_gone();
            return;
          }
          // Pipelined bytes: keep them for the next request, and keep watching (bounded).
          if ((self->state_ == State::kHandling || self->state_ == State::kStreaming) &&
              self->buf_.size() < 64 * 1024)
            self->start_monitor();
        });
  }

  void queue(std::string bytes, std::size_t payload) {
    if (state_ == State::kClosed) return;
    out_ += bytes;
    out_payload_ += payload;
    if (!writing_) flush();
  }

  void flush() {
    writing_ = true;
    wbuf_.swap(out_);
    out_.clear();
    wbuf_payload_ = out_payload_;
    out_payload_ = 0;
    arm_timer(srv_.opt.write_stall_timeout);
    net::async_write(
        socket_, net::buffer(wbuf_),
        [self = shared_from_this()](error_code ec, std::size_t) { self->on_written(ec); });
  }

  void on_written(error_code ec) {
    writing_ = false;
    disarm_timer();
    if (channel_) channel_->pending -= wbuf_payload_;
    wbuf_payload_ = 0;
    wbuf_.clear();
    if (ec) {
      client_gone();
      return;
    }
    if (!out_.empty()) {
      flush();
      return;
    }
    if (state_ == State::kDone) finish_response();
  }

  void finish_response() {
    if (!keep_alive_) {
      linger_close();
      return;
    }
    if (monitoring_) {
      resume_after_monitor_ = true;
      error_code ec;
      socket_.cancel(ec);
    } else {
      read_request();
    }
  }

  // Closes after a response the client may not have finished sending its request for
  // (a body over the limit): stop sending, then read and discard for a bounded time, so
  // the client reads our response instead of a reset.
  void linger_close() {
    if (monitoring_) {
      // The whole request was read (the monitor runs only then): a plain close is safe,
      // and one socket must not have two reads pending.
      close();
      return;
    }
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    arm_timer(std::chrono::seconds(5));
    state_ = State::kReading;  // the timer then closes
    discard();
  }
  void discard() {
    socket_.async_read_some(net::buffer(scratch_),
                            [self = shared_from_this()](error_code ec, std::size_t) {
                              if (ec || self->state_ == State::kClosed) {
                                self->close();
                                return;
                              }
                              self->discard();
                            });
  }

  void close() {
    if (state_ == State::kClosed) return;
    state_ = State::kClosed;
    if (channel_) channel_->mark_closed_and_fire();
    disarm_timer();
    ka_timer_.cancel();
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  tcp::socket socket_;
  HttpServer::Impl &srv_;
  std::string client_;
  net::steady_timer timer_;
  net::steady_timer ka_timer_;
  std::uint64_t timer_gen_ = 0;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool start_monitor_after_dispatch_ = false;  // the request was read whole
  State state_ = State::kReading;
  std::uint64_t gen_ = 0;
  bool keep_alive_ = true;
  bool monitoring_ = false;
  bool resume_after_monitor_ = false;
  bool writing_ = false;
  bool wrote_since_tick_ = false;
  std::string out_, wbuf_;
  std::size_t out_payload_ = 0, wbuf_payload_ = 0;
  std::shared_ptr<Channel> channel_;
  std::array<char, 16384> scratch_{};
};

template <typename F>
void Channel::post(F &&f) {
  if (auto s = session_.lock())
    net::post(s->executor(), [s, f = std::forward<F>(f)]() mutable { f(*s); });
}

void Channel::send(int status, std::string content_type, std::string body, HeaderList extra) {
  post([g = gen_, status, ct = std::move(content_type), b = std::move(body),
        ex = std::move(extra)](Session &s) mutable { s.do_send(g, status, ct, std::move(b), ex); });
}

void Channel::begin_sse(HeaderList extra) {
  post([g = gen_, ex = std::move(extra)](Session &s) { s.do_begin_sse(g, ex); });
}

bool Channel::write(std::string data) {
  if (closed_) return false;
  const std::size_t n = data.size();
  if (pending.fetch_add(n) + n > limit_) {
    // The client reads too slowly: drop it rather than buffer without bound.
    pending -= n;
    closed_ = true;
    post([](Session &s) { s.client_gone(); });
    return false;
  }
  post([g = gen_, d = std::move(data)](Session &s) mutable { s.do_write(g, std::move(d)); });
  return true;
}

void Channel::end() {
  post([g = gen_](Session &s) { s.do_end(g); });
}

void Channel::on_close(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (!fired_) {
      close_cbs_.push_back(std::move(fn));
      return;
    }
    if (!closed_ || !fn) return;
  }
  // Already gone (not merely done): run it now.
  if (session_.expired() || closed_) fn();
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      counters.accept_errors++;
      // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): the connection
      // stays in the backlog, so accepting again at once would spin. Wait, 10 ms
      // doubling to 250 ms, while sessions end and give descriptors back.
      if (ec == net::error::no_descriptors || ec == net::error::no_buffer_space ||
          ec == net::error::no_memory || ec.value() == ENFILE) {
        accept_backoff = std::clamp(accept_backoff * 2, std::chrono::milliseconds(10),
                                    std::chrono::milliseconds(250));
        accept_retry.expires_after(accept_backoff);
        accept_retry.async_wait([this](error_code e) {
          if (!e && acceptor.is_open()) accept();
        });
        return;
      }
    } else {
      accept_backoff = std::chrono::milliseconds(0);
      admit(std::move(socket));
    }
    accept();
  });
}

void HttpServer::Impl::admit(tcp::socket socket) {
  error_code ec;
  const auto peer = socket.remote_endpoint(ec);
  if (ec) {
    socket.close(ec);  // already gone
    return;
  }
  std::string key = peer.address().to_string();
  const char *why = nullptr;
  if (static_cast<std::size_t>(counters.open_connections.load()) >= opt.max_connections) {
    why = "the server has too many open connections";
  } else {
    std::lock_guard lock(clients_mu);
    std::size_t &n = clients[key];
    if (n >= opt.max_connections_per_client)
      why = "too many open connections from this address";
    else
      ++n;
  }
  if (why) {
    // Refused: one best-effort 503 on the fresh socket (its send buffer is empty), then
    // close. The per-client entry stays as it was.
    counters.refused++;
    {
      std::lock_guard lock(clients_mu);
      if (auto it = clients.find(key); it != clients.end() && it->second == 0) clients.erase(it);
    }
    const std::string body =
        std::string(R"({"error":{"message":")") + why + R"(","type":"server_error"}})";
    const std::string reply =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    socket.non_blocking(true, ec);
    socket.write_some(net::buffer(reply), ec);
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
    return;
  }
  std::make_shared<Session>(std::move(socket), *this, std::move(key))->start();
}

void HttpServer::Impl::release_client(const std::string &key) {
  std::lock_guard lock(clients_mu);
  auto it = clients.find(key);
  if (it == clients.end()) return;
  if (--it->second == 0) clients.erase(it);
}

HttpServer::HttpServer(HttpOptions options, HttpHandler handler, HttpHeaderCheck refuse_on_headers)
    : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  impl_->handler = std::move(handler);
  impl_->refuse_on_headers = std::move(refuse_on_headers);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  auto &im = *impl_;
  error_code ec;
  auto addr = net::ip::make_address(im.opt.host, ec);
  if (ec)
    throw Error(ErrorCode::kInvalidArgument, "--host: '" + im.opt.host + "' is not an IP address");
  tcp::endpoint ep(addr, im.opt.port);
  im.acceptor.open(ep.protocol(), ec);
  if (!ec) im.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) im.acceptor.bind(ep, ec);
  if (!ec) im.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw Error(ErrorCode::kUnavailable, "http: cannot listen on " + im.opt.host + ":" +
                                             std::to_string(im.opt.port) + ": " + ec.message());
  im.bound_port = im.acceptor.local_endpoint().port();
  im.work.emplace(im.ioc.get_executor());
  im.accept();
  for (int i = 0; i < std::max(1, im.opt.io_threads); ++i)
    im.threads.emplace_back([&im] { im.ioc.run(); });
}

void HttpServer::stop_accepting() {
  auto &im = *impl_;
  if (im.threads.empty()) return;
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  net::post(im.ioc, [&im, done] {
    error_code ec;
    im.acceptor.close(ec);
    done->set_value();
  });
  // Bounded: the I/O threads never block, so this runs within moments.
  fut.wait_for(std::chrono::seconds(2));
}

void HttpServer::stop() {
  auto &im = *impl_;
  if (im.threads.empty()) return;
  net::post(im.ioc, [&im] {
    error_code ec;
    im.acceptor.close(ec);
  });
  im.work.reset();
  im.ioc.stop();
  for (auto &t : im.threads) t.join();
  im.threads.clear();
}

std::uint16_t HttpServer::port() const { return impl_->bound_port; }
const HttpCounters &HttpServer::counters() const { return impl_->counters; }

}  // namespace keel::server
