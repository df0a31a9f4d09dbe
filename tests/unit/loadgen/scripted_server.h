// A scripted HTTP server on 127.0.0.1 for the loadgen tests.
#pragma once

// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
// clang-format on
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace keel::loadgen::testing {

// Answers each request with respond(request) and closes the connection; an empty answer
// leaves the connection open and silent until the server stops.
class ScriptedServer {
  using tcp = boost::asio::ip::tcp;

 public:
  explicit ScriptedServer(std::function<std::string(const std::string &)> respond)
      : respond_(std::move(respond)),
        acceptor_(io_, tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0)) {
    acceptor_.non_blocking(true);
    thread_ = std::thread([this] { serve(); });
  }
  ~ScriptedServer() {
    stop_ = true;
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }
  int requests() const { return requests_; }

 private:
  void serve() {
    std::vector<tcp::socket> silent;
    while (!stop_) {
      boost::system::error_code ec;
      tcp::socket s(io_);
      acceptor_.accept(s, ec);
      if (ec) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      s.non_blocking(false);
      std::string req;
      char buf[4096];
      std::size_t body_at = std::string::npos, need = 0;
      while (!ec) {
        const std::size_t n = s.read_some(boost::asio::buffer(buf), ec);
        req.append(buf, n);
        if (body_at == std::string::npos && (body_at = req.find("\r\n\r\n")) != std::string::npos) {
          body_at += 4;
          const auto cl = req.find("Content-Length: ");
          need = cl == std::string::npos ? 0 : std::stoul(req.substr(cl + 16));
        }
        if (body_at != std::string::npos && req.size() >= body_at + need) break;
      }
      ++requests_;
      const std::string answer = respond_(req);
      if (answer.empty()) {
        silent.push_back(std::move(s));
        continue;
      }
      boost::asio::write(s, boost::asio::buffer(answer), ec);
      s.shutdown(tcp::socket::shutdown_both, ec);
    }
  }

  std::function<std::string(const std::string &)> respond_;
  boost::asio::io_context io_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::atomic<int> requests_{0};
  std::thread thread_;
};

}  // namespace keel::loadgen::testing
