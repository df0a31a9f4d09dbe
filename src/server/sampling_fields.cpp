#include "server/sampling_fields.h"

#include "server/json_fields.h"

namespace keel::server {

void parse_sampling_fields(const nlohmann::ordered_json &body, SamplingParams &s) {
  if (auto v = opt_number(body, "temperature", 0.0, 2.0)) s.temperature = static_cast<float>(*v);
  if (auto v = opt_number(body, "top_p", 0.0, 1.0)) {
    if (*v <= 0.0) fail_field("top_p", "must be greater than 0");
    s.top_p = static_cast<float>(*v);
  }
  if (auto v = opt_int(body, "top_k", -1, 1 << 20)) s.top_k = static_cast<int32_t>(*v < 0 ? 0 : *v);
  if (auto v = opt_number(body, "min_p", 0.0, 1.0)) s.min_p = static_cast<float>(*v);
  if (auto v = opt_number(body, "presence_penalty", -2.0, 2.0))
    s.presence_penalty = static_cast<float>(*v);
  if (auto v = opt_number(body, "frequency_penalty", -2.0, 2.0))
    s.frequency_penalty = static_cast<float>(*v);
  if (auto v = opt_number(body, "repetition_penalty", 0.01, 10.0))
    s.repetition_penalty = static_cast<float>(*v);
  if (auto v = opt_int(body, "seed", INT64_MIN, INT64_MAX)) s.seed = static_cast<std::uint64_t>(*v);
  if (auto v = opt_bool(body, "ignore_eos")) s.ignore_eos = *v;
  if (auto v = opt_int(body, "min_tokens", 0, 1 << 30)) s.min_tokens = static_cast<int32_t>(*v);
  if (auto v = opt_bool(body, "speculative")) s.speculative = *v;  // opt out of drafting
}

void check_min_tokens(const SamplingParams &s, std::optional<std::int64_t> max_tokens,
                      const char *max_field) {
  if (max_tokens && s.min_tokens > *max_tokens)
    fail_field("min_tokens", "must be at most " + std::string(max_field) + " (" +
                                 std::to_string(*max_tokens) + "), got " +
                                 std::to_string(s.min_tokens));
}

std::vector<std::string> parse_stop_field(const nlohmann::ordered_json &body, const char *field,
                                          std::size_t max_count) {
  std::vector<std::string> out;
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return out;
  if (it->is_string()) {
    out.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->size() > max_count)
      fail_field(field, "at most " + std::to_string(max_count) + " stop sequences");
    for (const auto &s : *it) {
      if (!s.is_string()) fail_field(field, "must be a string or an array of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    fail_field(field, "must be a string or an array of strings");
  }
  for (const auto &s : out)
    if (s.empty()) fail_field(field, "stop sequences must not be empty");
  return out;
}

}  // namespace keel::server
