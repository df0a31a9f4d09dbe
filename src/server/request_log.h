// One log line per API request at info (method, path, model, status, tokens in/out,
// time to first token, duration), and at debug the body of every 4xx answer with the
// start of the request that drew it. A ResponseChannel decorator: it sees the status
// and the end of every response whatever the handler, and the generating handlers add
// what only they know (model, tokens, first-token time) through note_request.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "registry/log.h"
#include "server/http_types.h"
#include "server/latency_window.h"
#include "server/log_rate_limit.h"

namespace keel::server {

struct RequestNotes {
  std::string model;
  int tokens_in = -1, tokens_out = -1;
  double ttft_ms = -1;  // time to first token, from the request's arrival
};

class LoggedChannel final : public ResponseChannel {
 public:
  LoggedChannel(std::shared_ptr<ResponseChannel> inner, Logger log, const HttpRequest &req);
  ~LoggedChannel() override;

  void send(int status, std::string content_type, std::string body, HeaderList extra = {}) override;
  void begin_sse(HeaderList extra = {}) override;
  bool write(std::string data) override;
  void end() override;
  void on_close(std::function<void()> fn) override;
  bool closed() const override { return inner_->closed(); }

  void note(const RequestNotes &n);
  // Generations answered 200 with a first token also go into `w` (shared: a channel
  // may end after the server that made it).
  void record_latency_in(std::shared_ptr<LatencyWindow> w) { latency_ = std::move(w); }
  std::chrono::steady_clock::time_point arrived() const { return arrived_; }
  // 401 lines pass through `limit` (shared by the server's channels), so a flood of
  // unauthenticated requests cannot fill the log.
  void limit_unauthorized(std::shared_ptr<LogRateLimit> limit) { unauthorized_ = std::move(limit); }

 private:
  void finish();  // writes the line once

  std::shared_ptr<ResponseChannel> inner_;
  Logger log_;
  std::string method_, path_, request_head_;
  std::chrono::steady_clock::time_point arrived_;
  std::mutex mu_;
  RequestNotes notes_;
  int status_ = 0;
  bool logged_ = false;
  std::shared_ptr<LatencyWindow> latency_;
  std::shared_ptr<LogRateLimit> unauthorized_;
};

// Adds to the request's line when `ch` is a LoggedChannel (else nothing).
void note_request(const std::shared_ptr<ResponseChannel> &ch, const RequestNotes &n);
// The request's arrival, for time-to-first-token (now when `ch` is not logged).
std::chrono::steady_clock::time_point request_arrival(const std::shared_ptr<ResponseChannel> &ch);

}  // namespace keel::server
