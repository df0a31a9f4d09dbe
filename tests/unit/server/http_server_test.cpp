// The HTTP layer over real sockets: keepalive, body limit, SSE with a client that
// leaves (on_close fires) and a client that never reads (its bounded queue overflows).
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

using namespace keel::server;
using namespace std::chrono_literals;

namespace {

int connect_to(std::uint16_t port, int rcvbuf = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (rcvbuf) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void send_all(int fd, const std::string &s) {
  ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), (ssize_t)s.size());
}

// Reads until `needle` has been seen (or timeout / EOF).
std::string read_until(int fd, const std::string &needle) {
  std::string got;
  char buf[4096];
  while (got.find(needle) == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, n);
  }
  return got;
}

}  // namespace

TEST(HttpServer, KeepaliveAndBodyLimit) {
  HttpOptions o;
  o.port = 0;
  o.body_limit = 1000;
  HttpServer server(o, [](HttpRequest req, std::shared_ptr<ResponseChannel> ch) {
    if (req.transport_status) {
      ch->send(req.transport_status, "text/plain", "limit");
      return;
    }
    ch->send(200, "text/plain",
             req.method + " " + req.path + " " + std::to_string(req.body.size()));
  });
  server.start();
  int fd = connect_to(server.port());
  send_all(fd, "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
  EXPECT_NE(read_until(fd, "POST /a 3").find("HTTP/1.1 200 OK"), std::string::npos);
  send_all(fd, "GET /b?q=1 HTTP/1.1\r\nHost: x\r\n\r\n");  // same connection
  EXPECT_NE(read_until(fd, "GET /b 0").find("GET /b 0"), std::string::npos);
  send_all(fd,
           "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'z'));
  const std::string r = read_until(fd, "limit");
  EXPECT_NE(r.find("HTTP/1.1 413"), std::string::npos) << r;
  ::close(fd);
  server.stop();
}

// A request the header check refuses is handed over on its headers, its body unread, and
// the connection closes after the answer; one it passes is read whole as before.
TEST(HttpServer, RefusedOnHeadersIsAnsweredBeforeItsBody) {
  HttpOptions o;
  o.port = 0;
  o.body_limit = 1u << 30;
  std::atomic<int> checked{0};
  HttpServer server(
      o,
      [](HttpRequest req, std::shared_ptr<ResponseChannel> ch) {
        ch->send(req.body_unread ? 403 : 200, "text/plain",
                 req.path + " body " + std::to_string(req.body.size()) + ".");
      },
      [&](const HttpRequest &req) {
        ++checked;
        EXPECT_TRUE(req.body.empty());
        EXPECT_EQ(req.header("content-length"), "100000000");
        return req.path == "/refuse";
      });
  server.start();
  int fd = connect_to(server.port());
  send_all(fd, "POST /refuse HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n");
  std::string r = read_until(fd, "body 0.");
  EXPECT_NE(r.find("HTTP/1.1 403"), std::string::npos) << r;
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "the connection stays open";  // FIN, not a timeout
  ::close(fd);
  fd = connect_to(server.port());
  send_all(fd, "POST /pass HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\nabc");
  timeval tv{0, 300'000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  EXPECT_LT(::recv(fd, &c, 1, 0), 0);  // waits for the rest of its body: no answer yet
  ::close(fd);
  EXPECT_EQ(checked.load(), 2);
  server.stop();
}

TEST(HttpServer, ClientLeavingAStreamFiresOnClose) {
  HttpOptions o;
  o.port = 0;
  std::promise<void> closed;
  std::shared_ptr<ResponseChannel> stream;
  std::promise<void> started;
  HttpServer server(o, [&](HttpRequest, std::shared_ptr<ResponseChannel> ch) {
    ch->begin_sse();
    ch->write("data: 1\n\n");
    ch->on_close([&] { closed.set_value(); });
    stream = ch;
    started.set_value();
  });
  server.start();
  int fd = connect_to(server.port());
  send_all(fd, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(read_until(fd, "data: 1").find("text/event-stream"), std::string::npos);
  started.get_future().wait();
  ::close(fd);
  auto f = closed.get_future();
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready) << "disconnect was not seen";
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->write("data: 2\n\n"));
  EXPECT_EQ(server.counters().disconnects.load(), 1);
  server.stop();
}

TEST(HttpServer, AReaderThatNeverReadsIsBoundedAndDropped) {
  HttpOptions o;
  o.port = 0;
  o.max_queued_bytes = 64 * 1024;
  std::promise<std::shared_ptr<ResponseChannel>> got;
  std::atomic<bool> closed{false};
  HttpServer server(o, [&](HttpRequest, std::shared_ptr<ResponseChannel> ch) {
    ch->begin_sse();
    ch->on_close([&] { closed = true; });
    got.set_value(ch);
  });
  server.start();
  int fd = connect_to(server.port(), 4096);
  send_all(fd, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  auto ch = got.get_future().get();
  const std::string event = "data: " + std::string(1000, 'x') + "\n\n";
  std::size_t accepted = 0;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (ch->write(event) && std::chrono::steady_clock::now() < until) {
    ++accepted;
    if (accepted % 64 == 0) std::this_thread::sleep_for(1ms);  // let the socket fill
  }
  EXPECT_TRUE(ch->closed());
  // Kernel buffers take some, keel's queue at most 64 KiB: far less than 10 s of writes.
  EXPECT_LT(accepted * event.size(), 16u << 20);
  for (int i = 0; i < 100 && !closed; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(closed.load());
  ::close(fd);
  server.stop();
}

TEST(HttpServer, QuietStreamsGetKeepaliveComments) {
  HttpOptions o;
  o.port = 0;
  o.sse_keepalive = 100ms;
  std::shared_ptr<ResponseChannel> keep;
  HttpServer server(o, [&](HttpRequest, std::shared_ptr<ResponseChannel> ch) {
    ch->begin_sse();
    keep = ch;  // a long prefill: nothing to send yet
  });
  server.start();
  int fd = connect_to(server.port());
  send_all(fd, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string got = read_until(fd, ": keepalive");
  EXPECT_NE(got.find(": keepalive\n\n"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  ::close(fd);
  server.stop();
}
