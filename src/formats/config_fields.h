// Typed reads of config.json fields, each failure an Error naming the file and the key.
// Shared by the dense, MoE and latent-attention config readers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace keel::config_fields {

[[noreturn]] void fail(const std::string &origin, const std::string &why);

// An integer field; nullopt when absent or null, an error when of another type.
std::optional<std::int64_t> opt_int(const nlohmann::json &j, const char *key,
                                    const std::string &origin);
// The same, an error when absent.
std::int64_t req_int(const nlohmann::json &j, const char *key, const std::string &origin);
std::optional<double> opt_num(const nlohmann::json &j, const char *key, const std::string &origin);
std::optional<bool> opt_bool(const nlohmann::json &j, const char *key, const std::string &origin);

}  // namespace keel::config_fields
