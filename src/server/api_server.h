// The HTTP API: routes requests to the OpenAI, Anthropic and admin handlers, checks the
// API key, and runs handlers that may wait (model loads) on a worker pool so the I/O
// threads never block. Wire formats stay in openai/ and anthropic/.
#pragma once

#include <atomic>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "registry/model_registry.h"
#include "server/api_error.h"
#include "server/chat_prompt.h"
#include "server/forced_tool_option.h"
#include "server/generation_wire.h"
#include "server/http_server.h"
#include "server/http_types.h"
#include "server/latency_window.h"
#include "server/log_rate_limit.h"
#include "server/openai/response_store.h"
#include "server/request_guard.h"
#include "server/worker_watch.h"

namespace keel::server {

struct ApiOptions {
  std::string api_key;        // empty: no key needed
  RequestGuardOptions guard;  // Host / Origin / Content-Type checks (request_guard.h)
  int workers = 8;
  // /health turns 503 when requests wait and no worker took one for this long (0: off);
  // while a model loads, at least load_timeout (workers may wait on the load).
  std::chrono::milliseconds worker_deadline{30'000};
  std::chrono::milliseconds load_timeout{600'000};
  std::chrono::milliseconds heartbeat_timeout{10'000};  // /health fails at half of it
  std::string default_model;            // used when a request names no model (/tokenize etc.)
  bool enable_fault_injection = false;  // /debug/faults answers 403 without it
  std::optional<ForcedToolOption> forced_tool;  // tests only (--force-tool-call)
  openai::ResponseStoreLimits response_store;   // stored /v1/responses (store: true)
  Logger log;  // its ring (Logger::keep_in), when set, backs GET /api/logs
  // The dashboard's short benchmark of a model against this server (keel serve sets it;
  // unset: POST /api/bench answers 501). Returns results json with a "report_html".
  std::function<nlohmann::ordered_json(const std::string &model)> run_bench;
};

class ApiServer {
 public:
  ApiServer(ApiOptions options, ModelRegistry &registry);
  ~ApiServer();
  // Give the server's counters to /metrics and /api/status (optional).
  void set_http_counters(const HttpCounters *counters) { http_counters_ = counters; }
  void handle(HttpRequest req, std::shared_ptr<ResponseChannel> ch);
  // On a request's headers, before its body is read (HttpHeaderCheck): true when handle()
  // will refuse it whatever the body (Host 421, Origin 403, Content-Type 415, API key 401).
  bool refuses_on_headers(const HttpRequest &req) const;
  // Waits for the worker pool to finish the handlers in progress.
  void stop();
  // Shutting down: new generations are refused with 503 (in the endpoint's format).
  void set_draining() { draining_ = true; }

 private:
  bool authorized(const HttpRequest &req) const;
  // GET /admin and its files, public (they hold no data; the page asks for the key).
  // False when `req` is not one of them.
  bool serve_admin_file(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void route(HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void send_error(const std::shared_ptr<ResponseChannel> &ch, WireFormat f, const ApiError &e);
  void send_json(const std::shared_ptr<ResponseChannel> &ch, int status, const std::string &body);
  // Starts the generation and serves it in `wire`'s format, streamed or not: notes the
  // request's first token and token counts for its log line, answers a failed choice
  // with 503, and aborts the generation when the client leaves. Throws, before anything
  // is sent, when a non-streamed generation cannot start.
  void serve_generation(const std::shared_ptr<ResponseChannel> &ch, ModelLease lease,
                        GenerationSpec spec, GenerationWire wire);
  // Runs `fn` on the worker pool, turning exceptions into errors in format `f`.
  template <typename Fn>
  void run_guarded(const std::shared_ptr<ResponseChannel> &ch, WireFormat f, Fn fn);

  void handle_models(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void handle_model_action(const std::string &id, const std::string &action,
                           const std::shared_ptr<ResponseChannel> &ch);
  void handle_chat(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void handle_completions(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void handle_messages(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void handle_responses(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  // GET / DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel (action "cancel"),
  // GET /v1/responses/{id}/input_items (action "input_items").
  void handle_stored_response(const HttpRequest &req, const std::string &id,
                              const std::string &action,
                              const std::shared_ptr<ResponseChannel> &ch);
  void handle_count_tokens(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void handle_tokenize(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void handle_detokenize(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void handle_apply_template(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void handle_health(const std::shared_ptr<ResponseChannel> &ch);
  void handle_status(const std::shared_ptr<ResponseChannel> &ch);
  void handle_metrics(const std::shared_ptr<ResponseChannel> &ch);
  void handle_faults(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void handle_cache_clear(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  // The dashboard's endpoints (api_admin.cpp).
  void handle_logs(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);
  void handle_pin(const std::string &id, bool pinned, const std::shared_ptr<ResponseChannel> &ch);
  void handle_bench(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch);

  std::string new_id(const char *prefix);
  std::chrono::steady_clock::time_point load_deadline() const;
  // Throws the API's 404 naming the field `model` unless `id` is a model this server knows.
  void require_model(const std::string &id) const;
  // That 404: it lists the models this server knows.
  ApiError unknown_model(const std::string &id) const;
  // The context length of a model (0 when not known yet).
  std::int64_t context_length_of(const std::string &id) const;
  // The body's model, before validation, for the request's log line (a 400 line names
  // the model it was for).
  static void note_model(const std::shared_ptr<ResponseChannel> &ch,
                         const nlohmann::ordered_json &body);

  // Prefill / decode tokens per second from the engine's cumulative counters.
  struct RateSample {
    std::chrono::steady_clock::time_point at{};
    std::int64_t prefill = 0, decode = 0;
    double prefill_rate = 0, decode_rate = 0;
  };
  std::pair<double, double> rates(const std::string &model, const EngineStatus &s);

  ApiOptions options_;
  ModelRegistry &registry_;
  RequestGuard guard_;
  const HttpCounters *http_counters_ = nullptr;
  boost::asio::thread_pool pool_;
  WorkerWatch worker_watch_;  // stamped by run_guarded, read by /health
  std::atomic<std::uint64_t> next_request_id_{1};
  std::atomic<std::uint64_t> next_wire_id_{1};
  std::atomic<std::int64_t> generations_started_{0};
  std::atomic<std::int64_t> generations_failed_{0};
  std::atomic<std::int64_t> client_aborts_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> bench_running_{false};
  // Generations of the last minute, for /api/status.
  std::shared_ptr<LatencyWindow> latency_ = std::make_shared<LatencyWindow>();
  // 401 log lines: 5 a minute, then a count of those held back.
  std::shared_ptr<LogRateLimit> unauthorized_log_ =
      std::make_shared<LogRateLimit>(5, std::chrono::minutes(1));
  openai::ResponseStore responses_;
  std::mutex rates_mu_;
  std::map<std::string, RateSample> rates_;
};

// POST /debug/faults' body -> the fault (`model` is read by the caller). Throws the
// 400 ApiErrorException naming the field at fault.
FaultSpec parse_fault_request(const nlohmann::ordered_json &body);

// The value of `name=` in a query string (not URL-decoded), or empty.
std::string query_param(const std::string &query, const std::string &name);

}  // namespace keel::server
