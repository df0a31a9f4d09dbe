#include "loadgen/openai_wire.h"

namespace keel::loadgen {

using json = nlohmann::json;

const char *request_path(const Session &session) {
  return session.chat ? "/v1/chat/completions" : "/v1/completions";
}

json request_body(const Session &session, std::size_t turn, const std::vector<std::string> &replies,
                  const std::string &model) {
  const Turn &t = session.turns.at(turn);
  json body = {{"model", model},   {"max_tokens", t.max_tokens},
               {"temperature", 0}, {"ignore_eos", true},
               {"stream", true},   {"stream_options", {{"include_usage", true}}}};
  if (session.chat) {
    json messages = json::array();
    if (!session.system_prompt.empty())
      messages.push_back({{"role", "system"}, {"content", session.system_prompt}});
    for (std::size_t i = 0; i <= turn; ++i) {
      messages.push_back({{"role", "user"}, {"content", session.turns[i].prompt_text}});
      if (i < turn)
        messages.push_back(
            {{"role", "assistant"}, {"content", i < replies.size() ? replies[i] : ""}});
    }
    body["messages"] = std::move(messages);
  } else if (!t.prompt_ids.empty()) {
    body["prompt"] = t.prompt_ids;
  } else {
    body["prompt"] = t.prompt_text;
  }
  return body;
}

namespace {

std::string text_of(const json &obj, const char *field) {
  auto it = obj.find(field);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

int int_of(const json &obj, const char *field, int fallback) {
  auto it = obj.find(field);
  return it != obj.end() && it->is_number_integer() ? it->get<int>() : fallback;
}

}  // namespace

bool apply_event(std::string_view data, StreamState &state) {
  if (data == "[DONE]") {
    state.saw_done = true;
    return false;
  }
  const json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    state.error = "unparseable stream event: " + std::string(data.substr(0, 200));
    return false;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    state.error = e->is_object() ? text_of(*e, "message") : e->dump();
    if (state.error.empty()) state.error = e->dump();
    return false;
  }
  bool first = false;
  if (auto choices = j.find("choices"); choices != j.end() && choices->is_array()) {
    for (const json &c : *choices) {
      std::string piece = text_of(c, "text");
      std::string reasoning;
      if (auto d = c.find("delta"); d != c.end() && d->is_object()) {
        piece += text_of(*d, "content");
        reasoning = text_of(*d, "reasoning_content") + text_of(*d, "reasoning");
        if (d->contains("tool_calls")) reasoning += d->at("tool_calls").dump();
      }
      if (piece.empty() && reasoning.empty()) continue;
      state.reply += piece;
      ++state.content_events;
      if (!state.saw_content) first = true;
      state.saw_content = true;
    }
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    state.prompt_tokens = int_of(*u, "prompt_tokens", -1);
    state.completion_tokens = int_of(*u, "completion_tokens", -1);
    if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
      state.cached_tokens = int_of(*d, "cached_tokens", 0);
  }
  return first;
}

std::string error_message(std::string_view body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (auto e = j.find("error"); e != j.end()) {
      if (e->is_object() && e->contains("message") && (*e)["message"].is_string())
        return (*e)["message"].get<std::string>();
      if (e->is_string()) return e->get<std::string>();
    }
    if (auto m = j.find("message"); m != j.end() && m->is_string()) return m->get<std::string>();
  }
  return std::string(body.substr(0, 300));
}

}  // namespace keel::loadgen
