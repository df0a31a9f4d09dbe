// The dashboard (/admin): its embedded page, script and styles, and the endpoints only
// it needs: recent log lines, pin / unpin, and a short benchmark run in-process.
#include <cerrno>
#include <cstdlib>

#include "registry/log_ring.h"
#include "server/admin_files.h"
#include "server/api_server.h"
#include "server/json_fields.h"

namespace keel::server {

using json = nlohmann::ordered_json;

namespace {

const char *content_type_of(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

// The page may load only its own script and styles and talk only to this origin: an
// injected tag could neither run inline script nor send anything elsewhere.
HeaderList admin_headers() {
  return {{"Content-Security-Policy",
           "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"},
          {"X-Content-Type-Options", "nosniff"},
          {"Referrer-Policy", "no-referrer"},
          {"Cache-Control", "no-store"}};
}

}  // namespace

bool ApiServer::serve_admin_file(const HttpRequest &req,
                                 const std::shared_ptr<ResponseChannel> &ch) {
  std::string_view name;
  if (req.path == "/admin" || req.path == "/admin/")
    name = "index.html";
  else if (req.path.starts_with("/admin/"))
    name = std::string_view(req.path).substr(7);
  else
    return false;
  if (req.method != "GET") return false;  // the API's 405 / 404
  for (const auto &f : admin_files())
    if (f.name == name) {
      ch->send(200, content_type_of(name), std::string(f.bytes), admin_headers());
      return true;
    }
  return false;
}

void ApiServer::handle_logs(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch) {
  std::uint64_t after = 0;
  if (const std::string v = query_param(req.query, "after"); !v.empty()) {
    char *end = nullptr;
    errno = 0;
    after = std::strtoull(v.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || v[0] == '-')
      fail_field("after", "must be a non-negative integer (the last seq seen)");
  }
  json lines = json::array();
  const auto &ring = options_.log.ring();
  if (ring)
    for (const auto &l : ring->since(after, ring->capacity()))
      lines.push_back(
          {{"seq", l.seq}, {"time", l.unix_time}, {"level", l.level}, {"text", l.text}});
  send_json(ch, 200,
            json{{"lines", lines}, {"capacity", ring ? ring->capacity() : 0}}.dump(
                -1, ' ', false, json::error_handler_t::replace));
}

void ApiServer::handle_pin(const std::string &id, bool pinned,
                           const std::shared_ptr<ResponseChannel> &ch) {
  require_model(id);
  registry_.set_pinned(id, pinned);
  options_.log.log(LogLevel::kInfo, "model %s: %s from the API", id.c_str(),
                   pinned ? "pinned" : "unpinned");
  send_json(ch, 200, json{{"id", id}, {"pinned", pinned}}.dump());
}

void ApiServer::handle_bench(const HttpRequest &req, const std::shared_ptr<ResponseChannel> &ch) {
  const json body = parse_body(req.body);
  const auto model = opt_string(body, "model");
  if (!model || model->empty()) fail_field("model", "is required");
  require_model(*model);
  if (!options_.run_bench)
    throw ApiErrorException{{501, "this server was started without the benchmark", ""}};
  bool idle = false;
  if (!bench_running_.compare_exchange_strong(idle, true))
    throw ApiErrorException{{409, "a benchmark is already running; one runs at a time", ""}};
  struct Done {
    std::atomic<bool> &flag;
    ~Done() { flag = false; }
  } done{bench_running_};
  options_.log.log(LogLevel::kInfo, "benchmark of %s started from the API", model->c_str());
  json out = options_.run_bench(*model);
  send_json(ch, 200, out.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace keel::server
