#include "formats/config_fields.h"

#include "core/error.h"

namespace keel::config_fields {

using nlohmann::json;

void fail(const std::string &origin, const std::string &why) {
  throw Error(ErrorCode::kFormat, origin + ": " + why);
}

std::optional<std::int64_t> opt_int(const json &j, const char *key, const std::string &origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) fail(origin, std::string(key) + ": expected an integer");
  return it->get<std::int64_t>();
}

std::int64_t req_int(const json &j, const char *key, const std::string &origin) {
  auto v = opt_int(j, key, origin);
  if (!v) fail(origin, std::string(key) + ": missing");
  return *v;
}

std::optional<double> opt_num(const json &j, const char *key, const std::string &origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) fail(origin, std::string(key) + ": expected a number");
  return it->get<double>();
}

std::optional<bool> opt_bool(const json &j, const char *key, const std::string &origin) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) fail(origin, std::string(key) + ": expected a bool");
  return it->get<bool>();
}

}  // namespace keel::config_fields
