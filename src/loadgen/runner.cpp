#include "loadgen/runner.h"

#include <algorithm>
#include <array>
#include <csignal>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include "loadgen/beast_io.h"
#include "loadgen/openai_wire.h"
#include "loadgen/sse_parser.h"

namespace keel::loadgen {

namespace {

using Clock = std::chrono::steady_clock;

// A kept-alive connection and its read-ahead buffer (bytes past one response belong
// to the next).
struct Connection {
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
  void close() {
    if (stream) {
      boost::system::error_code ignored;
      stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream->close();
    }
    stream.reset();
    buffer.clear();
  }
};

class LevelRunner {
 public:
  LevelRunner(const Workload &w, const RunOptions &o)
      : w_(w), o_(o), recorded_(w.sessions.size(), 0), rng_(o.seed) {}

  LevelRun run() {
    t0_ = Clock::now();
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    eps_ = resolver.resolve(o_.endpoint.host, o_.endpoint.port, ec);
    if (ec) resolve_error_ = "resolve " + o_.endpoint.host + ": " + ec.message();
    if (!ec) {
      signals_.add(SIGINT);
      signals_.add(SIGTERM);
      signals_.async_wait([this](const boost::system::error_code &e, int) {
        if (!e) interrupt();
      });
      if (o_.request_rate > 0) {
        start(arrivals());
      } else {
        const auto users = std::min<std::size_t>(std::max(o_.concurrency, 1), w_.sessions.size());
        for (std::size_t u = 0; u < users; ++u) start(user());
      }
      // Every socket operation expires at the deadline; this guards the rest.
      io_.run_until(o_.deadline + std::chrono::seconds(2));
    }
    out_.interrupted = interrupted_;
    fill_unsent();
    double last = 0;
    for (const auto &r : out_.records)
      if (r.end_s > 0) last = std::max(last, r.end_s);
    out_.duration_s = last;
    return std::move(out_);
  }

 private:
  double since_start() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

  // A top-level coroutine; the signal wait ends with the last of them, so that run()
  // returns as soon as the work is done.
  void start(net::awaitable<void> work) {
    ++active_;
    net::co_spawn(io_, std::move(work), [this](std::exception_ptr) {
      if (--active_ == 0) {
        boost::system::error_code ignored;
        signals_.cancel(ignored);
      }
    });
  }

  // Cancels every pending operation; the coroutines then record their requests as
  // failed and send no more.
  void interrupt() {
    interrupted_ = true;
    for (Connection *c : open_)
      if (c->stream) c->stream->cancel();
    if (arrival_timer_) arrival_timer_->cancel();
  }

  void finish(RequestRecord r) {
    ++recorded_[r.session];
    if (!r.ok) ++failed_;
    out_.records.push_back(std::move(r));
    if (o_.on_progress) o_.on_progress(static_cast<int>(out_.records.size()), failed_);
  }

  // Turns that never ran (the deadline came first) are failures too, so that every
  // turn of the workload has a record.
  void fill_unsent() {
    for (std::size_t s = 0; s < w_.sessions.size(); ++s) {
      for (int t = recorded_[s]; t < static_cast<int>(w_.sessions[s].turns.size()); ++t) {
        RequestRecord r;
        r.session = static_cast<int>(s);
        r.turn = t;
        r.error = !resolve_error_.empty() ? resolve_error_
                  : interrupted_          ? "not sent: interrupted"
                                          : "not finished before --timeout";
        finish(std::move(r));
      }
    }
  }

  net::awaitable<void> user() {
    Connection conn;
    open_.insert(&conn);
    while (next_session_ < w_.sessions.size() && Clock::now() < o_.deadline && !interrupted_)
      co_await session(next_session_++, conn);
    conn.close();
    open_.erase(&conn);
  }

  // A session of its own connection (request-rate mode).
  net::awaitable<void> lone_session(std::size_t idx) {
    Connection conn;
    open_.insert(&conn);
    co_await session(idx, conn);
    conn.close();
    open_.erase(&conn);
  }

  net::awaitable<void> arrivals() {
    std::exponential_distribution<double> gap(o_.request_rate);
    net::steady_timer timer(io_);
    arrival_timer_ = &timer;
    auto at = Clock::now();
    while (next_session_ < w_.sessions.size() && !interrupted_) {
      at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng_)));
      if (at >= o_.deadline) break;
      timer.expires_at(at);
      boost::system::error_code ec;
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
      if (interrupted_) break;
      start(lone_session(next_session_++));
    }
    arrival_timer_ = nullptr;
  }

  // The turns of one session in order; an agent's history grows by each reply. After a
  // failed turn the rest of the session is recorded as failed without being sent.
  net::awaitable<void> session(std::size_t idx, Connection &conn) {
    const Session &s = w_.sessions[idx];
    std::vector<std::string> replies;
    for (std::size_t t = 0; t < s.turns.size(); ++t) {
      std::string reply;
      RequestRecord r = co_await request(s, t, replies, conn, reply);
      r.session = static_cast<int>(idx);
      r.turn = static_cast<int>(t);
      const bool ok = r.ok;
      finish(std::move(r));
      if (!ok) {
        for (std::size_t rest = t + 1; rest < s.turns.size(); ++rest) {
          RequestRecord skipped;
          skipped.session = static_cast<int>(idx);
          skipped.turn = static_cast<int>(rest);
          skipped.error = "not sent: an earlier turn of its session failed";
          finish(std::move(skipped));
        }
        co_return;
      }
      replies.push_back(std::move(reply));
    }
  }

  net::awaitable<RequestRecord> request(const Session &s, std::size_t turn,
                                        const std::vector<std::string> &replies, Connection &conn,
                                        std::string &reply) {
    RequestRecord r;
    r.start_s = since_start();
    if (interrupted_) {
      r.error = "not sent: interrupted";
      co_return r;
    }
    auto fail = [&](const std::string &what, const boost::system::error_code &ec) {
      r.error = what + ": " +
                (interrupted_                  ? std::string("interrupted")
                 : ec == beast::error::timeout ? std::string("timed out (--timeout)")
                                               : ec.message());
      r.end_s = since_start();
      conn.close();
    };
    boost::system::error_code ec;
    if (!conn.stream) {
      conn.stream.emplace(io_);
      conn.stream->expires_at(o_.deadline);
      co_await conn.stream->async_connect(eps_, net::redirect_error(net::use_awaitable, ec));
      if (ec) {
        fail("connect to " + o_.endpoint.host_port(), ec);
        co_return r;
      }
    }
    conn.stream->expires_at(o_.deadline);
    auto req = make_request(o_.endpoint, http::verb::post, request_path(s),
                            request_body(s, turn, replies, o_.model).dump(), o_.api_key);
    co_await http::async_write(*conn.stream, req, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      fail("send", ec);
      co_return r;
    }
    http::response_parser<http::buffer_body> parser;
    // Not boost::none: Boost 1.74 then fails every response that has a Content-Length.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    co_await http::async_read_header(*conn.stream, conn.buffer, parser,
                                     net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      fail("read response", ec);
      co_return r;
    }
    const int status = static_cast<int>(parser.get().result_int());
    SseParser sse;
    StreamState st;
    std::string error_body;
    // read_some, not read: read would fill the whole buffer before it returns, hiding
    // when each event arrived.
    std::array<char, 16384> chunk;
    while (!parser.is_done()) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      co_await http::async_read_some(*conn.stream, conn.buffer, parser,
                                     net::redirect_error(net::use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) break;
      const std::string_view got(chunk.data(), chunk.size() - parser.get().body().size);
      if (status != 200) {
        if (error_body.size() < 4096) error_body.append(got);
        continue;
      }
      sse.feed(got, [&](std::string_view data) {
        if (apply_event(data, st)) r.ttft_s = since_start() - r.start_s;
      });
    }
    r.end_s = since_start();
    if (ec) {
      fail("read stream", ec);
      co_return r;
    }
    if (!parser.keep_alive()) conn.close();
    if (status != 200) {
      r.error = "HTTP " + std::to_string(status) + ": " + error_message(error_body);
    } else if (!st.error.empty()) {
      r.error = "stream error: " + st.error;
    } else if (st.completion_tokens < 0 || st.prompt_tokens < 0) {
      r.error = "the stream carried no usage (stream_options.include_usage)";
    } else {
      r.ok = true;
    }
    r.prompt_tokens = std::max(st.prompt_tokens, 0);
    r.output_tokens = std::max(st.completion_tokens, 0);
    r.cached_tokens = st.cached_tokens;
    r.content_events = st.content_events;
    reply = std::move(st.reply);
    co_return r;
  }

  const Workload &w_;
  const RunOptions &o_;
  net::io_context io_;
  tcp::resolver::results_type eps_;
  std::string resolve_error_;
  Clock::time_point t0_;
  std::size_t next_session_ = 0;
  std::vector<int> recorded_;  // records made per session
  int failed_ = 0;
  std::mt19937_64 rng_;
  net::signal_set signals_{io_};
  std::set<Connection *> open_;                 // connections whose operations interrupt() cancels
  net::steady_timer *arrival_timer_ = nullptr;  // the arrivals' wait, while it runs
  int active_ = 0;                              // top-level coroutines still running
  bool interrupted_ = false;
  LevelRun out_;
};

}  // namespace

LevelRun run_level(const Workload &workload, const RunOptions &options) {
  return LevelRunner(workload, options).run();
}

}  // namespace keel::loadgen
