#include "server/anthropic/anthropic_types.h"
#include "server/api_error.h"
#include "server/json_fields.h"
#include "server/sampling_fields.h"

namespace keel::server::anthropic {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string text_of(const json &content, const std::string &field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) fail_field(field, "must be a string or an array of content blocks");
  std::string out;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const auto &b = content[i];
    const std::string bf = field + "[" + std::to_string(i) + "]";
    if (!b.is_object()) fail_field(bf, "must be an object");
    auto type = b.find("type");
    if (type == b.end() || !type->is_string()) fail_field(bf + ".type", "is required");
    if (*type == "text") {
      auto t = b.find("text");
      if (t == b.end() || !t->is_string()) fail_field(bf + ".text", "must be a string");
      out += t->get<std::string>();
    } else if (*type == "tool_result") {
      auto c = b.find("content");
      if (c != b.end()) out += text_of(*c, bf + ".content");
    } else {
      fail_field(bf + ".type", "'" + type->get<std::string>() + "' blocks are not supported");
    }
  }
  return out;
}

const char *stop_reason(const std::string &finish, const std::string &stop_sequence) {
  if (!stop_sequence.empty()) return "stop_sequence";
  if (finish == "length") return "max_tokens";
  return "end_turn";
}

}  // namespace

MessagesRequest parse_messages(const json &body, bool for_count_tokens) {
  MessagesRequest r;
  r.model = req_string(body, "model");
  if (auto mt = opt_int(body, "max_tokens", 1, 1 << 30))
    r.sampling.max_tokens = static_cast<int32_t>(*mt);
  else if (!for_count_tokens)
    fail_field("max_tokens", "is required");
  r.messages = json::array();
  auto sys = body.find("system");
  if (sys != body.end() && !sys->is_null())
    r.messages.push_back({{"role", "system"}, {"content", text_of(*sys, "system")}});
  auto msgs = body.find("messages");
  if (msgs == body.end() || msgs->is_null()) fail_field("messages", "is required");
  if (!msgs->is_array()) fail_field("messages", "must be an array");
  if (msgs->empty()) fail_field("messages", "must not be empty");
  for (std::size_t i = 0; i < msgs->size(); ++i) {
    const auto &m = (*msgs)[i];
    const std::string f = "messages." + std::to_string(i);
    if (!m.is_object()) fail_field(f, "must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) fail_field(f + ".role", "is required");
    if (*role != "user" && *role != "assistant")
      fail_field(f + ".role", "must be 'user' or 'assistant'");
    auto c = m.find("content");
    if (c == m.end() || c->is_null()) fail_field(f + ".content", "is required");
    r.messages.push_back({{"role", *role}, {"content", text_of(*c, f + ".content")}});
  }
  // Sampling: Anthropic's temperature range is [0, 1].
  if (auto v = opt_number(body, "temperature", 0.0, 1.0))
    r.sampling.temperature = static_cast<float>(*v);
  json rest = body;
  rest.erase("temperature");
  parse_sampling_fields(rest, r.sampling);
  r.stop_sequences = parse_stop_field(body, "stop_sequences", 16);
  r.stream = opt_bool(body, "stream").value_or(false);
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) fail_field("tools", "must be an array");
    r.tools = *tools;
  }
  return r;
}

std::string render_message(const RenderContext &ctx, const Generation &g) {
  const auto &r = g.results().at(0);
  const int cached = g.cached_tokens();
  return dump({{"id", ctx.id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", ctx.model},
               {"content", json::array({{{"type", "text"}, {"text", r.text}}})},
               {"stop_reason", stop_reason(r.finish, r.stop_sequence)},
               {"stop_sequence", r.stop_sequence.empty() ? json(nullptr) : json(r.stop_sequence)},
               {"usage",
                {{"input_tokens", g.prompt_tokens() - cached},
                 {"output_tokens", g.completion_tokens()},
                 {"cache_creation_input_tokens", 0},
                 {"cache_read_input_tokens", cached}}}});
}

std::string sse_event(const std::string &name, const json &data) {
  return "event: " + name + "\ndata: " + dump(data) + "\n\n";
}

std::string stream_start(const RenderContext &ctx, int input_tokens, int cached_tokens) {
  json msg{{"id", ctx.id},
           {"type", "message"},
           {"role", "assistant"},
           {"model", ctx.model},
           {"content", json::array()},
           {"stop_reason", nullptr},
           {"stop_sequence", nullptr},
           {"usage",
            {{"input_tokens", input_tokens - cached_tokens},
             {"output_tokens", 0},
             {"cache_creation_input_tokens", 0},
             {"cache_read_input_tokens", cached_tokens}}}};
  return sse_event("message_start", {{"type", "message_start"}, {"message", msg}}) +
         sse_event("content_block_start", {{"type", "content_block_start"},
                                           {"index", 0},
                                           {"content_block", {{"type", "text"}, {"text", ""}}}}) +
         sse_event("ping", {{"type", "ping"}});
}

std::string stream_delta(const std::string &text) {
  return sse_event("content_block_delta", {{"type", "content_block_delta"},
                                           {"index", 0},
                                           {"delta", {{"type", "text_delta"}, {"text", text}}}});
}

std::string stream_finish(const ChoiceDelta &d, int output_tokens) {
  const std::string finish = d.finish.value_or("stop");
  return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
         sse_event("message_delta",
                   {{"type", "message_delta"},
                    {"delta",
                     {{"stop_reason", stop_reason(finish, d.stop_sequence)},
                      {"stop_sequence",
                       d.stop_sequence.empty() ? json(nullptr) : json(d.stop_sequence)}}},
                    {"usage", {{"output_tokens", output_tokens}}}}) +
         sse_event("message_stop", {{"type", "message_stop"}});
}

std::string stream_error(int status, const std::string &message) {
  return sse_event("error",
                   {{"type", "error"},
                    {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}});
}

}  // namespace keel::server::anthropic
