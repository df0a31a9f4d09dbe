#include "server/request_log.h"

#include <cstdio>

namespace keel::server {

namespace {

constexpr std::size_t kBodyShown = 1024;  // of a 4xx request, at debug

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) out += (c == '\n' || c == '\r') ? ' ' : c;
  return out;
}

}  // namespace

LoggedChannel::LoggedChannel(std::shared_ptr<ResponseChannel> inner, Logger log,
                             const HttpRequest &req)
    : inner_(std::move(inner)),
      log_(std::move(log)),
      method_(req.method),
      path_(req.path),
      arrived_(std::chrono::steady_clock::now()) {
  if (log_.enabled(LogLevel::kDebug)) request_head_ = req.body.substr(0, kBodyShown);
}

LoggedChannel::~LoggedChannel() { finish(); }

void LoggedChannel::send(int status, std::string content_type, std::string body, HeaderList extra) {
  {
    std::lock_guard l(mu_);
    if (status_ == 0) status_ = status;
  }
  if (status >= 400 && status < 500 && status != 401 && log_.enabled(LogLevel::kDebug))
    log_.log(LogLevel::kDebug, "%s %s -> %d %s (request: %s%s)", method_.c_str(), path_.c_str(),
             status, printable(body).c_str(), printable(request_head_).c_str(),
             request_head_.size() == kBodyShown ? "..." : "");
  // The line is written before the answer leaves, so a client that has its answer can
  // already read the line (a test reads the log right after the response).
  finish();
  inner_->send(status, std::move(content_type), std::move(body), std::move(extra));
}

void LoggedChannel::begin_sse(HeaderList extra) {
  {
    std::lock_guard l(mu_);
    if (status_ == 0) status_ = 200;
  }
  inner_->begin_sse(std::move(extra));
}

bool LoggedChannel::write(std::string data) { return inner_->write(std::move(data)); }

void LoggedChannel::end() {
  inner_->end();
  finish();
}

void LoggedChannel::on_close(std::function<void()> fn) { inner_->on_close(std::move(fn)); }

void LoggedChannel::note(const RequestNotes &n) {
  std::lock_guard l(mu_);
  if (!n.model.empty()) notes_.model = n.model;
  if (n.tokens_in >= 0) notes_.tokens_in = n.tokens_in;
  if (n.tokens_out >= 0) notes_.tokens_out = n.tokens_out;
  if (n.ttft_ms >= 0) notes_.ttft_ms = n.ttft_ms;
}

void LoggedChannel::finish() {
  RequestNotes n;
  int status;
  {
    std::lock_guard l(mu_);
    if (logged_) return;
    logged_ = true;
    n = notes_;
    status = status_;
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - arrived_)
          .count();
  if (latency_ && status == 200 && n.ttft_ms >= 0) latency_->add(n.ttft_ms, ms);
  // API calls at info; health checks, status polls and the like only at debug.
  const LogLevel level = path_.rfind("/v1/", 0) == 0 ? LogLevel::kInfo : LogLevel::kDebug;
  if (!log_.enabled(level)) return;
  std::string closed = inner_->closed() && status == 200 ? " (client left)" : "";
  if (status == 401 && unauthorized_) {
    std::uint64_t held_back = 0;
    if (!unauthorized_->allow(&held_back)) return;
    if (held_back > 0) closed += " (" + std::to_string(held_back) + " more 401s not logged)";
  }
  auto num = [](int v) { return v < 0 ? std::string("-") : std::to_string(v); };
  char ttft[32] = "-";
  if (n.ttft_ms >= 0) std::snprintf(ttft, sizeof ttft, "%.1fms", n.ttft_ms);
  log_.log(level, "%s %s model=%s status=%d in=%s out=%s ttft=%s dur=%.1fms%s", method_.c_str(),
           path_.c_str(), n.model.empty() ? "-" : n.model.c_str(), status, num(n.tokens_in).c_str(),
           num(n.tokens_out).c_str(), ttft, ms, closed.c_str());
}

void note_request(const std::shared_ptr<ResponseChannel> &ch, const RequestNotes &n) {
  if (auto *l = dynamic_cast<LoggedChannel *>(ch.get())) l->note(n);
}

std::chrono::steady_clock::time_point request_arrival(const std::shared_ptr<ResponseChannel> &ch) {
  if (auto *l = dynamic_cast<LoggedChannel *>(ch.get())) return l->arrived();
  return std::chrono::steady_clock::now();
}

}  // namespace keel::server
