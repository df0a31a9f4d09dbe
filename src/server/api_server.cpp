#include "server/api_server.h"

#include <boost/asio/post.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <optional>

#include "server/json_fields.h"
#include "server/openai/openai_types.h"
#include "server/request_budget.h"
#include "server/request_log.h"

namespace keel::server {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Compares in time that depends only on the lengths, not on where the bytes differ.
bool constant_time_equal(std::string_view a, std::string_view b) {
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  const std::size_t n = std::max(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

// The token of "Bearer TOKEN": the scheme in any case (RFC 9110 11.1), then spaces.
std::optional<std::string_view> bearer_token(std::string_view auth) {
  constexpr std::string_view kScheme = "bearer";
  if (auth.size() <= kScheme.size() ||
      (auth[kScheme.size()] != ' ' && auth[kScheme.size()] != '\t'))
    return std::nullopt;
  for (std::size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(auth[i])) != kScheme[i]) return std::nullopt;
  auth.remove_prefix(kScheme.size());
  while (!auth.empty() && (auth.front() == ' ' || auth.front() == '\t')) auth.remove_prefix(1);
  while (!auth.empty() && (auth.back() == ' ' || auth.back() == '\t')) auth.remove_suffix(1);
  return auth;
}

WireFormat format_of(std::string_view path) {
  return starts_with(path, "/v1/messages") ? WireFormat::kAnthropic : WireFormat::kOpenAI;
}

}  // namespace

ApiServer::ApiServer(ApiOptions options, ModelRegistry &registry)
    : options_(std::move(options)),
      registry_(registry),
      guard_(options_.guard),
      pool_(static_cast<std::size_t>(std::max(1, options_.workers))),
      responses_(options_.response_store) {}

ApiServer::~ApiServer() { stop(); }

void ApiServer::stop() {
  pool_.stop();
  pool_.join();
}

std::string ApiServer::new_id(const char *prefix) {
  char buf[64];
  const auto t = std::chrono::system_clock::now().time_since_epoch().count();
  std::snprintf(buf, sizeof buf, "%s%012llx%06llx", prefix,
                static_cast<unsigned long long>(t & 0xffffffffffffULL),
                static_cast<unsigned long long>(next_wire_id_.fetch_add(1) & 0xffffff));
  return buf;
}

Clock::time_point ApiServer::load_deadline() const { return Clock::now() + options_.load_timeout; }

void ApiServer::require_model(const std::string &id) const {
  if (!registry_.has(id)) throw ApiErrorException{unknown_model(id)};
}

ApiError ApiServer::unknown_model(const std::string &id) const {
  constexpr std::size_t kListed = 20;
  const auto reports = registry_.report();
  std::string known;
  for (std::size_t i = 0; i < reports.size() && i < kListed; ++i)
    known += (i ? ", " : "") + reports[i].id;
  if (reports.size() > kListed)
    known += " and " + std::to_string(reports.size() - kListed) + " more (GET /v1/models)";
  return {404,
          "model: '" + id + "' is not a model this server knows (it serves: " +
              (known.empty() ? std::string("none") : known) + ")",
          "model"};
}

std::int64_t ApiServer::context_length_of(const std::string &id) const {
  for (const auto &r : registry_.report())
    if (r.id == id) return r.context_length;
  return 0;
}

bool ApiServer::authorized(const HttpRequest &req) const {
  if (options_.api_key.empty()) return true;
  if (auto token = bearer_token(req.header("authorization"));
      token && constant_time_equal(*token, options_.api_key))
    return true;
  std::string_view key = req.header("x-api-key");
  return !key.empty() && constant_time_equal(key, options_.api_key);
}

void ApiServer::send_json(const std::shared_ptr<ResponseChannel> &ch, int status,
                          const std::string &body) {
  ch->send(status, "application/json", body);
}

void ApiServer::send_error(const std::shared_ptr<ResponseChannel> &ch, WireFormat f,
                           const ApiError &e) {
  send_json(ch, e.status,
            f == WireFormat::kAnthropic ? render_anthropic_error(e) : render_openai_error(e));
}

template <typename Fn>
void ApiServer::run_guarded(const std::shared_ptr<ResponseChannel> &ch, WireFormat f, Fn fn) {
  worker_watch_.posted();
  boost::asio::post(pool_, [this, ch, f, fn = std::move(fn)]() mutable {
    worker_watch_.taken();
    try {
      fn();
    } catch (const ApiErrorException &e) {
      send_error(ch, f, e.error);
    } catch (const Error &e) {
      send_error(ch, f, api_error_from(e));
    } catch (const std::exception &e) {
      send_error(ch, f, {500, std::string("internal error: ") + e.what(), ""});
    }
  });
}

bool ApiServer::refuses_on_headers(const HttpRequest &req) const {
  if (guard_.check(req)) return true;
  if (req.path == "/health") return false;
  // The dashboard's files are public (serve_admin_file): their GETs pass to handle().
  if (req.method == "GET" && (req.path == "/admin" || starts_with(req.path, "/admin/")))
    return false;
  return !authorized(req);
}

void ApiServer::handle(HttpRequest req, std::shared_ptr<ResponseChannel> ch) {
  auto logged = std::make_shared<LoggedChannel>(std::move(ch), options_.log, req);
  logged->record_latency_in(latency_);
  logged->limit_unauthorized(unauthorized_log_);
  ch = std::move(logged);
  const WireFormat f = format_of(req.path);
  if (req.transport_status != 0) {
    send_error(ch, f, {req.transport_status, req.transport_error, "body"});
    return;
  }
  if (auto refused = guard_.check(req)) {
    send_error(ch, f, *refused);
    return;
  }
  if (req.path == "/health") {
    handle_health(ch);
    return;
  }
  if (serve_admin_file(req, ch)) return;
  if (!authorized(req)) {
    send_error(
        ch, f,
        {401, "invalid or missing API key (Authorization: Bearer KEY or x-api-key: KEY)", ""});
    return;
  }
  if (req.body_unread) {  // refuses_on_headers and the checks above disagree: never serve it
    send_error(ch, f, {400, "request refused before its body was read", ""});
    return;
  }
  route(req, ch);
}

void ApiServer::route(HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch) {
  const std::string &p = req.path;
  const bool get = req.method == "GET", post = req.method == "POST";
  auto need = [&](bool ok) {
    if (!ok)
      send_error(ch, format_of(p), {405, "method " + req.method + " is not allowed on " + p, ""});
    return ok;
  };
  auto offload =
      [&](void (ApiServer::*h)(const HttpRequest &, const std::shared_ptr<ResponseChannel> &)) {
        const WireFormat f = format_of(p);  // before req (and p with it) moves into the task
        run_guarded(ch, f, [this, h, ch, r = std::move(req)] { (this->*h)(r, ch); });
      };
  if (p == "/v1/models") {
    if (need(get)) handle_models(req, ch);
  } else if (starts_with(p, "/v1/models/")) {
    std::string rest = p.substr(11);
    const auto slash = rest.rfind('/');
    const std::string verb = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (verb == "load" || verb == "unload") {
      if (!need(post)) return;
      std::string id = rest.substr(0, slash), action = rest.substr(slash + 1);
      run_guarded(ch, WireFormat::kOpenAI,
                  [this, id, action, ch] { handle_model_action(id, action, ch); });
    } else if (verb == "pin" || verb == "unpin") {
      if (!need(post)) return;
      std::string id = rest.substr(0, slash);
      run_guarded(ch, WireFormat::kOpenAI,
                  [this, id, pin = verb == "pin", ch] { handle_pin(id, pin, ch); });
    } else if (need(get)) {
      if (!registry_.has(rest)) {
        send_error(ch, WireFormat::kOpenAI, unknown_model(rest));
        return;
      }
      send_json(
          ch, 200,
          json{{"id", rest}, {"object", "model"}, {"created", 0}, {"owned_by", "keel"}}.dump());
    }
  } else if (draining_ && post &&
             (p == "/v1/chat/completions" || p == "/v1/completions" || p == "/v1/messages" ||
              p == "/v1/responses")) {
    send_error(ch, format_of(p), {503, "server is shutting down", ""});
  } else if (p == "/v1/chat/completions") {
    if (need(post)) offload(&ApiServer::handle_chat);
  } else if (p == "/v1/completions") {
    if (need(post)) offload(&ApiServer::handle_completions);
  } else if (p == "/v1/responses") {
    if (need(post)) offload(&ApiServer::handle_responses);
  } else if (starts_with(p, "/v1/responses/")) {
    // {id}, {id}/cancel or {id}/input_items
    std::string id = p.substr(14), action;
    if (const auto slash = id.find('/'); slash != std::string::npos) {
      action = id.substr(slash + 1);
      id.resize(slash);
    }
    if (id.empty() || (!action.empty() && action != "cancel" && action != "input_items")) {
      send_error(ch, WireFormat::kOpenAI, {404, "no such endpoint: " + req.method + " " + p, ""});
    } else if (need(action == "cancel" ? post
                                       : get || (action.empty() && req.method == "DELETE"))) {
      run_guarded(ch, WireFormat::kOpenAI, [this, r = std::move(req), id, action, ch] {
        handle_stored_response(r, id, action, ch);
      });
    }
  } else if (p == "/v1/messages") {
    if (need(post)) offload(&ApiServer::handle_messages);
  } else if (p == "/v1/messages/count_tokens") {
    if (need(post)) offload(&ApiServer::handle_count_tokens);
  } else if (p == "/tokenize") {
    if (need(post)) offload(&ApiServer::handle_tokenize);
  } else if (p == "/detokenize") {
    if (need(post)) offload(&ApiServer::handle_detokenize);
  } else if (p == "/apply-template") {
    if (need(post)) offload(&ApiServer::handle_apply_template);
  } else if (p == "/api/status") {
    if (need(get)) handle_status(ch);
  } else if (p == "/api/logs") {
    if (need(get)) offload(&ApiServer::handle_logs);
  } else if (p == "/api/bench") {
    if (need(post)) offload(&ApiServer::handle_bench);
  } else if (p == "/metrics") {
    if (need(get)) handle_metrics(ch);
  } else if (p == "/debug/faults") {
    if (need(get || post || req.method == "DELETE")) offload(&ApiServer::handle_faults);
  } else if (p == "/v1/cache/clear") {
    if (need(post)) offload(&ApiServer::handle_cache_clear);
  } else {
    send_error(ch, format_of(p), {404, "no such endpoint: " + req.method + " " + p, ""});
  }
}

void ApiServer::handle_models(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch) {
  const auto reports = registry_.report();
  json data = json::array();
  const bool anthropic = !req.header("anthropic-version").empty();
  for (const auto &r : reports) {
    if (anthropic)
      data.push_back({{"type", "model"},
                      {"id", r.id},
                      {"display_name", r.id},
                      {"created_at", "1970-01-01T00:00:00Z"}});
    else
      data.push_back(
          {{"id", r.id},
           {"object", "model"},
           {"created", 0},
           {"owned_by", "keel"},
           {"state", model_state_name(r.state)},
           {"max_model_len", r.context_length ? json(r.context_length) : json(nullptr)}});
  }
  if (anthropic)
    send_json(ch, 200,
              json{{"data", data},
                   {"has_more", false},
                   {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
                   {"last_id", data.empty() ? json(nullptr) : data.back()["id"]}}
                  .dump());
  else
    send_json(ch, 200, json{{"object", "list"}, {"data", data}}.dump());
}

void ApiServer::handle_model_action(const std::string &id, const std::string &action,
                                    const std::shared_ptr<ResponseChannel> &ch) {
  require_model(id);
  if (action == "load") {
    registry_.load(id, load_deadline());
  } else {
    registry_.unload(id);
  }
  for (const auto &r : registry_.report())
    if (r.id == id) {
      send_json(
          ch, 200,
          json{{"id", id}, {"state", model_state_name(r.state)}, {"memory_bytes", r.memory_bytes}}
              .dump());
      return;
    }
}

namespace {

std::string model_field(const json &body, const std::string &fallback) {
  auto m = opt_string(body, "model");
  if (m) return *m;
  if (fallback.empty()) fail_field("model", "is required");
  return fallback;
}

// The local conveniences take chat messages as /v1/chat/completions does (same checks,
// content parts flattened, tool calls and tool turns shaped for templates).
openai::ChatRequest chat_messages(const json &body, const std::string &model) {
  json chat{{"model", model}, {"messages", body.contains("messages") ? body["messages"] : json()}};
  for (const char *k : {"tools", "chat_template_kwargs", "reasoning_effort"})
    if (body.contains(k)) chat[k] = body[k];
  return openai::parse_chat(chat);
}

}  // namespace

void ApiServer::handle_tokenize(const HttpRequest &req,
                                const std::shared_ptr<ResponseChannel> &ch) {
  const json body = parse_body(req.body);
  const std::string model = model_field(body, options_.default_model);
  require_model(model);
  const ModelText &text = registry_.text(model);
  const std::int64_t context = context_length_of(model);
  std::vector<TokenId> ids;
  if (body.contains("messages")) {
    const auto chat = chat_messages(body, model);
    const std::string prompt =
        render_chat_prompt(text, chat.messages, chat.tools, chat.template_kwargs);
    check_prompt_bytes(static_cast<std::int64_t>(prompt.size()), context, "messages");
    ids = text.encode(prompt, !text.has_chat_template());
  } else {
    const char *field = body.contains("prompt") ? "prompt" : "text";
    auto prompt = opt_string(body, field);
    if (!prompt) fail_field("prompt", "is required (or messages)");
    check_prompt_bytes(static_cast<std::int64_t>(prompt->size()), context, field);
    ids = text.encode(*prompt, opt_bool(body, "add_special_tokens").value_or(true));
  }
  json out{{"tokens", ids}, {"count", ids.size()}};
  if (context) out["max_model_len"] = context;
  send_json(ch, 200, out.dump());
}

void ApiServer::handle_detokenize(const HttpRequest &req,
                                  const std::shared_ptr<ResponseChannel> &ch) {
  const json body = parse_body(req.body);
  const std::string model = model_field(body, options_.default_model);
  require_model(model);
  const ModelText &text = registry_.text(model);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) fail_field("tokens", "must be an array of token ids");
  check_token_count(static_cast<std::int64_t>(it->size()), context_length_of(model), "tokens");
  std::vector<TokenId> ids;
  for (const auto &t : *it) {
    if (!t.is_number_integer() && !t.is_number_unsigned())
      fail_field("tokens", "token ids must be integers");
    const auto v = t.get<std::int64_t>();
    if (v < 0 || v >= text.vocab_size())
      fail_field("tokens", "token id " + std::to_string(v) + " is out of range");
    ids.push_back(static_cast<TokenId>(v));
  }
  const std::string s = text.decode(ids);
  send_json(ch, 200,
            json{{"prompt", s}, {"text", s}}.dump(-1, ' ', false, json::error_handler_t::replace));
}

void ApiServer::handle_apply_template(const HttpRequest &req,
                                      const std::shared_ptr<ResponseChannel> &ch) {
  const json body = parse_body(req.body);
  const std::string model = model_field(body, options_.default_model);
  require_model(model);
  const ModelText &text = registry_.text(model);
  const auto chat = chat_messages(body, model);
  const bool add_gen = opt_bool(body, "add_generation_prompt").value_or(true);
  const std::string prompt =
      render_chat_prompt(text, chat.messages, chat.tools, chat.template_kwargs, add_gen);
  send_json(ch, 200, json{{"prompt", prompt}}.dump());
}

}  // namespace keel::server
