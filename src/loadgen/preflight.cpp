#include "loadgen/preflight.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "loadgen/http_client.h"
#include "loadgen/openai_wire.h"

namespace keel::loadgen {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::vector<std::string> served_models(const Endpoint &ep, const std::string &api_key) {
  const HttpResponse r = http_request(ep, "/v1/models", "", api_key, 10s);
  if (r.status == 401 || r.status == 403)
    throw Error(ErrorCode::kInvalidArgument,
                ep.host_port() + " refused the API key (HTTP " + std::to_string(r.status) +
                    "): " + error_message(r.body) + "; pass --api-key");
  std::vector<std::string> ids;
  if (r.status != 200) return ids;
  const json j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) return ids;
  for (const json &m : j["data"])
    if (m.is_object() && m.contains("id") && m["id"].is_string())
      ids.push_back(m["id"].get<std::string>());
  return ids;
}

std::string choose_model(const std::vector<std::string> &served, const std::string &wanted,
                         const std::string &server) {
  if (served.empty()) {
    if (wanted.empty())
      throw Error(ErrorCode::kInvalidArgument,
                  server + " lists no models (/v1/models); pass --model");
    return wanted;
  }
  if (wanted.empty()) return served.front();
  for (const auto &id : served)
    if (id == wanted) return wanted;
  std::string list;
  for (const auto &id : served) list += (list.empty() ? "" : ", ") + id;
  throw Error(ErrorCode::kNotFound,
              "model '" + wanted + "' is not served at " + server + " (it serves: " + list + ")");
}

bool takes_token_prompts(const Endpoint &ep, const std::string &api_key, const std::string &model,
                         int lowest_id, int highest_id) {
  const json body = {{"model", model}, {"prompt", {lowest_id, highest_id}}, {"max_tokens", 1}};
  const HttpResponse r = http_request(ep, "/v1/completions", body.dump(), api_key, 120s);
  if (r.status >= 500)
    throw Error(ErrorCode::kUnavailable, "model '" + model + "' at " + ep.host_port() +
                                             " cannot serve (HTTP " + std::to_string(r.status) +
                                             "): " + error_message(r.body));
  return r.status == 200;
}

}  // namespace keel::loadgen
