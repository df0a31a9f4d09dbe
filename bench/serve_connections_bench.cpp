// Many concurrent SSE streams, most of them slow readers, against keel's HTTP layer.
// A stand-in engine thread "steps" every --step-ms and writes one token event to every
// open stream through ResponseChannel::write (as the engine client's thread does in
// keel serve). Measures what the issue asks: that slow readers delay neither the other
// clients' tokens (latency from step to arrival at fast clients) nor the engine's steps
// (time one step spends handing its writes to the HTTP layer).
//
//   serve_connections_bench [--conns 1000] [--fast 50] [--seconds 10] [--step-ms 20]
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <utility>  // before Asio: Boost 1.81's awaitable.hpp needs std::exchange

#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http_server.h"

namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace keel::server;

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * (v.size() - 1)))];
}

long rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

struct Client : std::enable_shared_from_this<Client> {
  tcp::socket sock;
  bool fast;
  std::string buf;
  std::array<char, 8192> chunk{};
  std::vector<double> *latencies;
  std::mutex *lat_mu;
  net::steady_timer timer;
  std::size_t bytes = 0;
  Client(net::io_context &io, bool f, std::vector<double> *l, std::mutex *m)
      : sock(io), fast(f), latencies(l), lat_mu(m), timer(io) {}

  void start(const tcp::endpoint &ep) {
    sock.open(tcp::v4());
    if (!fast) sock.set_option(net::socket_base::receive_buffer_size(4096));  // let the server's queue grow
    sock.async_connect(ep, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return;
      static const std::string req = "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n";
      net::async_write(self->sock, net::buffer(req), [self](boost::system::error_code ec, std::size_t) {
        if (!ec) self->fast ? self->read() : self->slow_read();
      });
    });
  }
  void read() {
    sock.async_read_some(net::buffer(chunk), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
      if (ec) return;
      self->bytes += n;
      self->buf.append(self->chunk.data(), n);
      const std::int64_t t = now_ns();
      std::size_t pos;
      while ((pos = self->buf.find("data: ")) != std::string::npos) {
        const auto end = self->buf.find('\n', pos);
        if (end == std::string::npos) break;
        const std::int64_t sent = std::stoll(self->buf.substr(pos + 6, end - pos - 6));
        {
          std::lock_guard l(*self->lat_mu);
          self->latencies->push_back((t - sent) / 1e6);
        }
        self->buf.erase(0, end + 1);
      }
      if (self->buf.size() > 65536) self->buf.clear();
      self->read();
    });
  }
  // A slow reader: 256 bytes a second.
  void slow_read() {
    timer.expires_after(std::chrono::seconds(1));
    timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return;
      self->sock.async_read_some(net::buffer(self->chunk.data(), 256),
                                 [self](boost::system::error_code ec, std::size_t n) {
                                   if (ec) return;
                                   self->bytes += n;
                                   self->slow_read();
                                 });
    });
  }
};

}  // namespace

int main(int argc, char **argv) {
  int conns = 1000, fast = 50, seconds = 10, step_ms = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--conns")) conns = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--fast")) fast = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seconds")) seconds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--step-ms")) step_ms = std::atoi(argv[i + 1]);
  }
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);

  std::mutex mu;
  std::vector<std::shared_ptr<ResponseChannel>> streams;
  HttpOptions ho;
  ho.port = 0;
  ho.io_threads = 1;
  ho.max_queued_bytes = 1u << 20;
  HttpServer server(ho, [&](HttpRequest, std::shared_ptr<ResponseChannel> ch) {
    ch->begin_sse();
    std::lock_guard l(mu);
    streams.push_back(ch);
  });
  server.start();
  const tcp::endpoint ep(net::ip::make_address("127.0.0.1"), server.port());

  net::io_context io;
  std::vector<double> latencies;
  std::mutex lat_mu;
  std::vector<std::shared_ptr<Client>> clients;
  for (int i = 0; i < conns; ++i) {
    clients.push_back(std::make_shared<Client>(io, i < fast, &latencies, &lat_mu));
    clients.back()->start(ep);
  }
  std::thread client_thread([&] { io.run(); });
  for (int i = 0; i < 200 && static_cast<int>(streams.size()) < conns; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::size_t connected;
  {
    std::lock_guard l(mu);
    connected = streams.size();
  }

  // The stand-in engine: one event per stream per step.
  std::vector<double> step_write_ms, step_period_ms;
  const std::string pad(80, 'x');  // about the size of a token chunk's JSON
  auto last = Clock::now();
  const auto until = Clock::now() + std::chrono::seconds(seconds);
  std::size_t dropped = 0;
  while (Clock::now() < until) {
    auto next = last + std::chrono::milliseconds(step_ms);
    std::this_thread::sleep_until(next);
    const auto t0 = Clock::now();
    step_period_ms.push_back(std::chrono::duration<double, std::milli>(t0 - last).count());
    last = t0;
    const std::string payload = "data: " + std::to_string(now_ns()) + "\n" + ": " + pad + "\n\n";
    std::lock_guard l(mu);
    for (auto &s : streams)
      if (s && !s->write(payload)) {
        s.reset();
        ++dropped;
      }
    step_write_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  const long rss = rss_kib();
  const auto &c = server.counters();
  std::printf("connections: %zu streaming (%d fast readers, %d slow readers at 256 B/s with 4 KiB receive buffers)\n",
              connected, fast, conns - fast);
  std::printf("steps: %zu every %d ms; one step's writes to all streams: p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              step_write_ms.size(), step_ms, pct(step_write_ms, 0.5), pct(step_write_ms, 0.99), pct(step_write_ms, 1.0));
  std::printf("step period: p50 %.2f ms, p99 %.2f ms, max %.2f ms\n", pct(step_period_ms, 0.5), pct(step_period_ms, 0.99),
              pct(step_period_ms, 1.0));
  std::lock_guard l(lat_mu);
  std::printf("fast readers' token latency (step -> client): %zu events, p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              latencies.size(), pct(latencies, 0.5), pct(latencies, 0.99), pct(latencies, 1.0));
  std::printf("slow readers dropped at their queue bound (1 MiB): %zu (server counter %lld); open connections %lld\n",
              dropped, static_cast<long long>(c.dropped_slow.load()), static_cast<long long>(c.open_connections.load()));
  std::printf("process RSS: %.1f MiB\n", rss / 1024.0);
  io.stop();
  client_thread.join();
  server.stop();
  return 0;
}
