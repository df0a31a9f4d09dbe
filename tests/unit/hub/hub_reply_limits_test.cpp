// keel pull reads the hub's answer with limits (issue 31): its size (HttpLimits::
// max_reply_bytes, before the body is read when the reply announces it), and the request
// parser's nesting, keys and string limits (core/bounded_json.h). A loopback server
// stands in for a hostile or broken hub (PullOptions::endpoint); each refusal names the
// reply and the limit, and nothing is written to the cache.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "core/error.h"
#include "hub/hub_pull.h"
#include "hub/hub_spec.h"

namespace fs = std::filesystem;
using keel::Error;
using keel::ErrorCode;

namespace {

constexpr const char *kSha = "0123456789abcdef0123456789abcdef01234567";

// Answers one HTTP request on loopback with `body` (with a Content-Length, or delimited by
// the connection's close), then closes.
class OneReplyServer {
 public:
  OneReplyServer(std::string body, bool content_length) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 4), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr *>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this, body = std::move(body), content_length] {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, n);
      }
      std::string head =
          "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n";
      if (content_length) head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
      head += "\r\n";
      const std::string all = head + body;
      for (std::size_t at = 0; at < all.size();) {
        const ssize_t n = ::send(c, all.data() + at, all.size() - at, MSG_NOSIGNAL);
        if (n <= 0) break;  // the client stopped reading: it refused the reply
        at += static_cast<std::size_t>(n);
      }
      ::shutdown(c, SHUT_RDWR);
      ::close(c);
    });
  }
  ~OneReplyServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread thread_;
};

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/keel-hub-reply-test.XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// The message of the error pull() throws for the reply `body`.
std::string pull_error(std::string body, bool content_length = true,
                       std::size_t max_reply_bytes = 32u << 20) {
  OneReplyServer hub(std::move(body), content_length);
  TempDir cache;
  keel::hub::PullOptions opt;
  opt.endpoint = hub.url();
  opt.cache_root = cache.path;
  opt.progress = nullptr;
  opt.limits.max_reply_bytes = max_reply_bytes;
  opt.limits.stall_seconds = 10;
  keel::hub::RepoSpec spec;
  spec.repo = "org/model";
  try {
    keel::hub::pull(spec, opt);
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kFormat) << e.what();
    EXPECT_FALSE(fs::exists(cache.path / keel::hub::repo_folder("org/model"))) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "pull accepted the reply";
  return "";
}

std::string info_with(const std::string &extra) {
  return std::string(R"({"sha":")") + kSha + R"(","siblings":[],)" + extra + "}";
}

}  // namespace

TEST(HubReplyLimits, TooDeepIsRefusedNamingTheReplyAndTheLimit) {
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  const std::string msg = pull_error(info_with(R"("cardData":)" + deep));
  EXPECT_NE(msg.find("'org/model'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/api/models/org/model/revision/main"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nesting deeper than the limit of 128"), std::string::npos) << msg;
}

TEST(HubReplyLimits, TooManyKeysAreRefused) {
  std::string keys = R"("cardData":{)";
  for (int i = 0; i < 5000; ++i) keys += (i ? "," : "") + ("\"k" + std::to_string(i) + "\":0");
  keys += "}";
  const std::string msg = pull_error(info_with(keys));
  EXPECT_NE(msg.find("more than 4096 keys"), std::string::npos) << msg;
}

TEST(HubReplyLimits, AnOversizedReplyIsRefusedWithOrWithoutItsLength) {
  const std::string big = info_with(R"("pad":")" + std::string(200'000, 'x') + "\"");
  for (const bool announced : {true, false}) {
    const std::string msg = pull_error(big, announced, 64 * 1024);
    EXPECT_NE(msg.find("larger than 65536 bytes"), std::string::npos) << announced << ": " << msg;
    EXPECT_NE(msg.find("/api/models/org/model"), std::string::npos) << msg;
  }
}

TEST(HubReplyLimits, MalformedAndNonObjectRepliesAreFormatErrors) {
  EXPECT_NE(pull_error("[1,2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(pull_error("{\"sha\": ").find("not JSON"), std::string::npos);
  EXPECT_NE(pull_error(R"({"sha":7,"siblings":[]})").find("no valid commit sha"),
            std::string::npos);
}
