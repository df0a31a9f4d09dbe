// /v1/responses request validation and its conversion to a chat request: input items
// (messages, function_call, function_call_output, reasoning) become chat messages as
// templates expect them, with every error naming the field (e.g. "input[2].call_id").
#include <algorithm>
#include <set>

#include "server/json_fields.h"
#include "server/openai/openai_structured.h"
#include "server/openai/responses_types.h"
#include "server/sampling_fields.h"

namespace keel::server::openai {

using json = nlohmann::ordered_json;

namespace {

// Tool types Codex sends on every request that keel cannot run: the hosted web search
// and namespaces of sub-agent tools. They are optional to the client, so they are left
// out of the prompt (the model cannot call them) instead of failing every turn.
bool ignored_tool_type(const std::string &t) {
  return t == "web_search" || t == "web_search_preview" || t.rfind("web_search_preview_", 0) == 0 ||
         t == "namespace";
}

std::string item_type(const json &item, const std::string &f) {
  if (!item.is_object()) fail_field(f, "must be an object");
  auto type = item.find("type");
  if (type != item.end() && !type->is_null()) {
    if (!type->is_string()) fail_field(f + ".type", "must be a string");
    return type->get<std::string>();
  }
  // An EasyInputMessage: {role, content} without a type.
  if (item.contains("role")) return "message";
  fail_field(f + ".type", "is required");
}

// Text of a message's content: a string, or parts of which text parts are kept.
std::string content_text(const json &content, const std::string &f) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) fail_field(f, "must be a string or an array of content parts");
  std::string out;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json &part = content[i];
    const std::string pf = f + "[" + std::to_string(i) + "]";
    const std::string type = item_type(part, pf);
    if (type == "input_text" || type == "output_text" || type == "text" || type == "summary_text" ||
        type == "reasoning_text") {
      auto t = part.find("text");
      if (t == part.end() || !t->is_string()) fail_field(pf + ".text", "must be a string");
      out += t->get<std::string>();
    } else if (type == "refusal") {
      auto t = part.find("refusal");
      if (t == part.end() || !t->is_string()) fail_field(pf + ".refusal", "must be a string");
      out += t->get<std::string>();
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      fail_field(pf + ".type", "'" + type + "' content is not supported (text only)");
    } else {
      fail_field(pf + ".type", "'" + type + "' is not a known content part type");
    }
  }
  return out;
}

std::string required_string(const json &item, const char *key, const std::string &f) {
  auto it = item.find(key);
  if (it == item.end() || !it->is_string() || it->get_ref<const std::string &>().empty())
    fail_field(f + "." + key, "is required and must be a non-empty string");
  return it->get<std::string>();
}

// Checks one input item (throws naming `f`); returns its type.
std::string check_item(const json &item, const std::string &f) {
  const std::string type = item_type(item, f);
  if (type == "message") {
    auto role = item.find("role");
    if (role == item.end() || !role->is_string())
      fail_field(f + ".role", "is required and must be a string");
    if (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer")
      fail_field(f + ".role", "must be one of user, assistant, system, developer");
    auto c = item.find("content");
    if (c == item.end() || c->is_null()) fail_field(f + ".content", "is required");
    content_text(*c, f + ".content");
  } else if (type == "function_call") {
    required_string(item, "call_id", f);
    required_string(item, "name", f);
    auto a = item.find("arguments");
    if (a == item.end() || !a->is_string())
      fail_field(f + ".arguments", "is required and must be a string (JSON text)");
  } else if (type == "function_call_output") {
    required_string(item, "call_id", f);
    auto o = item.find("output");
    if (o == item.end() || o->is_null()) fail_field(f + ".output", "is required");
    content_text(*o, f + ".output");
  } else if (type == "reasoning") {
    for (const char *k : {"summary", "content"}) {
      auto s = item.find(k);
      if (s == item.end() || s->is_null()) continue;
      if (!s->is_array()) fail_field(f + "." + k, "must be an array");
      content_text(*s, f + "." + k);
    }
    if (item.contains("encrypted_content") && !item["encrypted_content"].is_null() &&
        !item["encrypted_content"].is_string())
      fail_field(f + ".encrypted_content", "must be a string");
  } else {
    fail_field(f + ".type", "'" + type +
                                "' is not a supported input item (message, function_call, "
                                "function_call_output, reasoning)");
  }
  return type;
}

// Converts checked items to chat messages. `first_input` is the index of this request's
// first item in `items` (earlier ones come from previous_response_id), for field names.
json to_messages(const json &items, std::size_t first_input, const json &instructions) {
  json messages = json::array();
  if (instructions.is_string() && !instructions.get_ref<const std::string &>().empty())
    messages.push_back({{"role", "system"}, {"content", instructions}});
  std::set<std::string> call_ids;
  std::string reasoning;  // waits for the assistant turn it belongs to
  auto field = [&](std::size_t i) {
    return i >= first_input ? "input[" + std::to_string(i - first_input) + "]"
                            : std::string("previous_response_id");
  };
  // The assistant turn an item joins: the last message while it is the assistant's (text
  // only joins one that has made no calls yet), else a new one. Pending reasoning goes
  // with it.
  auto assistant_turn = [&](bool text) -> json & {
    if (messages.empty() || messages.back()["role"] != "assistant" ||
        (text && messages.back().contains("tool_calls")))
      messages.push_back({{"role", "assistant"}, {"content", ""}});
    json &m = messages.back();
    if (!reasoning.empty()) {
      m["reasoning_content"] = reasoning;
      reasoning.clear();
    }
    return m;
  };
  for (std::size_t i = 0; i < items.size(); ++i) {
    const json &item = items[i];
    const std::string f = field(i);
    const std::string type = item_type(item, f);
    if (type == "message") {
      std::string role = item["role"].get<std::string>();
      const std::string text = content_text(item["content"], f + ".content");
      if (role == "developer") role = "system";
      if (role == "system" && !messages.empty() &&
          std::all_of(messages.begin(), messages.end(),
                      [](const json &m) { return m["role"] == "system"; })) {
        // Templates take one leading system prompt: instructions and developer
        // messages before the conversation merge into it, in order.
        std::string &s = messages.front()["content"].get_ref<std::string &>();
        s += "\n\n" + text;
      } else if (role == "assistant") {
        json &m = assistant_turn(true);
        m["content"].get_ref<std::string &>() += text;
      } else {
        messages.push_back({{"role", role}, {"content", text}});
      }
    } else if (type == "function_call") {
      const std::string id = item["call_id"].get<std::string>();
      call_ids.insert(id);
      json call =
          json::array({{{"id", id},
                        {"type", "function"},
                        {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}}});
      json &m = assistant_turn(false);
      json converted = template_tool_calls(call, f);
      if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
      m["tool_calls"].push_back(converted[0]);
    } else if (type == "function_call_output") {
      const std::string id = item["call_id"].get<std::string>();
      if (!call_ids.count(id))
        fail_field(f + ".call_id", "no function_call with call_id '" + id +
                                       "' comes before it in the conversation");
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", id},
                          {"content", content_text(item["output"], f + ".output")}});
    } else if (type == "reasoning") {
      for (const char *k : {"summary", "content"})
        if (item.contains(k) && item[k].is_array()) reasoning += content_text(item[k], f + "." + k);
    }
  }
  return messages;
}

void parse_response_tools(const json &body, ResponsesRequest &r) {
  r.tools = json::array();
  json chat_tools = json::array();
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) fail_field("tools", "must be an array");
    if (tools->size() > 512) fail_field("tools", "at most 512 tools");
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const json &t = (*tools)[i];
      const std::string f = "tools[" + std::to_string(i) + "]";
      const std::string type = item_type(t, f);
      if (ignored_tool_type(type)) continue;
      if (type != "function")
        fail_field(f + ".type", "'" + type + "' tools are not supported (only 'function')");
      // The chat validator checks name, description, parameters and strict.
      json fn = t;
      fn.erase("type");
      chat_tools.push_back({{"type", "function"}, {"function", fn}});
      r.tools.push_back(t);
    }
  }
  json chat{{"tools", chat_tools}};
  if (chat_tools.empty()) chat.erase("tools");
  // tool_choice in the chat shape, which validates it and the forced tools' schemas.
  auto tc = body.find("tool_choice");
  if (tc != body.end() && !tc->is_null()) {
    r.tool_choice = *tc;
    if (tc->is_string()) {
      if (*tc != "auto" && *tc != "none" && *tc != "required")
        fail_field("tool_choice", "must be 'auto', 'none', 'required' or an object");
      chat["tool_choice"] = *tc;
    } else if (tc->is_object()) {
      if (tc->value("type", "") != "function") fail_field("tool_choice.type", "must be 'function'");
      if (!tc->contains("name") || !(*tc)["name"].is_string())
        fail_field("tool_choice.name", "is required");
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*tc)["name"]}}}};
    } else {
      fail_field("tool_choice", "must be a string or an object");
    }
  }
  try {
    parse_tools(chat, r.chat);
  } catch (ApiErrorException &e) {
    // "tools[2].function.name" -> "tools[2].name", as the client wrote it.
    std::string &p = e.error.param;
    if (auto at = p.find(".function."); at != std::string::npos) p.erase(at, 9);
    e.error.message = p + e.error.message.substr(e.error.message.find(':'));
    throw;
  }
  r.parallel_tool_calls = opt_bool(body, "parallel_tool_calls").value_or(true);
}

void parse_reasoning(const json &body, ResponsesRequest &r) {
  auto rs = body.find("reasoning");
  if (rs == body.end() || rs->is_null()) return;
  if (!rs->is_object()) fail_field("reasoning", "must be an object");
  if (auto e = rs->find("effort"); e != rs->end() && !e->is_null()) {
    static const std::set<std::string> efforts{"none", "minimal", "low", "medium", "high", "xhigh"};
    if (!e->is_string() || !efforts.count(e->get<std::string>()))
      fail_field("reasoning.effort", "must be one of none, minimal, low, medium, high, xhigh");
    r.reasoning_effort = e->get<std::string>();
    // Templates (gpt-oss's, and keel's harmony prompt) read it as a variable.
    if (!r.chat.template_kwargs.contains("reasoning_effort"))
      r.chat.template_kwargs["reasoning_effort"] = *r.reasoning_effort;
  }
  for (const char *k : {"summary", "generate_summary"}) {
    auto s = rs->find(k);
    if (s == rs->end() || s->is_null()) continue;
    if (!s->is_string() || (*s != "auto" && *s != "concise" && *s != "detailed" && *s != "none"))
      fail_field(std::string("reasoning.") + k, "must be one of auto, concise, detailed, none");
    r.reasoning_summary = s->get<std::string>();
  }
}

void parse_text_format(const json &body, ResponsesRequest &r) {
  auto t = body.find("text");
  if (t == body.end() || t->is_null()) return;
  if (!t->is_object()) fail_field("text", "must be an object");
  if (auto v = t->find("verbosity"); v != t->end() && !v->is_null()) {
    if (!v->is_string() || (*v != "low" && *v != "medium" && *v != "high"))
      fail_field("text.verbosity", "must be one of low, medium, high");
    r.text["verbosity"] = *v;
  }
  auto f = t->find("format");
  if (f == t->end() || f->is_null()) return;
  if (!f->is_object()) fail_field("text.format", "must be an object");
  auto type = f->find("type");
  if (type == f->end() || !type->is_string()) fail_field("text.format.type", "is required");
  if (*type == "json_object") {
    set_json_schema_constraint(r.chat.sampling, nullptr, "text.format");
  } else if (*type == "json_schema") {
    // Responses put the schema in the format itself (chat: json_schema.schema).
    auto schema = f->find("schema");
    if (schema == f->end() || !schema->is_object())
      fail_field("text.format.schema", "is required and must be a JSON Schema object");
    set_json_schema_constraint(r.chat.sampling, *schema, "text.format.schema");
  } else if (*type != "text") {
    fail_field("text.format.type", "must be 'text', 'json_schema' or 'json_object'");
  }
  r.text["format"] = *f;
  if (r.chat.forces_tool_call() && !r.chat.sampling.constraint_kind.empty())
    fail_field("tool_choice", "a forced tool call cannot be combined with text.format");
}

// Fields that are hints (accepted, checked for type) or that keel cannot honour.
void check_extras(const json &body, ResponsesRequest &r) {
  r.user = opt_string(body, "user");
  r.prompt_cache_key = opt_string(body, "prompt_cache_key");
  for (const char *f : {"service_tier", "safety_identifier", "prompt_cache_retention"})
    opt_string(body, f);
  if (auto t = opt_string(body, "truncation"); t && *t != "auto" && *t != "disabled")
    fail_field("truncation", "must be 'auto' or 'disabled'");
  opt_int(body, "top_logprobs", 0, 20);
  opt_int(body, "max_tool_calls", 1, 1 << 20);
  auto md = body.find("metadata");
  if (md != body.end() && !md->is_null()) {
    if (!md->is_object()) fail_field("metadata", "must be an object of strings");
    if (md->size() > 16) fail_field("metadata", "at most 16 keys");
    for (const auto &[k, v] : md->items())
      if (!v.is_string()) fail_field("metadata." + k, "must be a string");
    r.metadata = *md;
  }
  auto inc = body.find("include");
  if (inc != body.end() && !inc->is_null()) {
    if (!inc->is_array()) fail_field("include", "must be an array of strings");
    for (const auto &x : *inc)
      if (!x.is_string()) fail_field("include", "must be an array of strings");
  }
  for (const char *f : {"conversation", "prompt"})
    if (body.contains(f) && !body[f].is_null())
      fail_field(f, "is not supported: send the input items (or previous_response_id)");
  auto so = body.find("stream_options");
  if (so != body.end() && !so->is_null() && !so->is_object())
    fail_field("stream_options", "must be an object");
}

}  // namespace

ResponsesRequest parse_responses(const json &body, const PreviousLookup &previous,
                                 const ItemLookup &item) {
  ResponsesRequest r;
  r.chat.model = req_string(body, "model");
  auto ins = body.find("instructions");
  if (ins != body.end() && !ins->is_null()) {
    if (!ins->is_string()) fail_field("instructions", "must be a string");
    r.instructions = *ins;
  }
  r.previous_response_id = opt_string(body, "previous_response_id");
  r.conversation = json::array();
  if (r.previous_response_id) {
    auto prev = previous ? previous(*r.previous_response_id) : std::nullopt;
    if (!prev)
      fail_field("previous_response_id", "no stored response '" + *r.previous_response_id +
                                             "' (unknown, deleted, expired, or stored with "
                                             "store: false)");
    r.conversation = std::move(*prev);
  }
  const std::size_t first_input = r.conversation.size();
  auto input = body.find("input");
  if (input == body.end() || input->is_null()) {
    if (!r.previous_response_id) fail_field("input", "is required");
  } else if (input->is_string()) {
    r.conversation.push_back({{"type", "message"}, {"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    for (std::size_t i = 0; i < input->size(); ++i) {
      const std::string f = "input[" + std::to_string(i) + "]";
      const json &in = (*input)[i];
      if (item_type(in, f) == "item_reference") {
        // An item of a stored response (the AI SDK sends these when store is on).
        const std::string id = required_string(in, "id", f);
        auto found = item ? item(id) : std::nullopt;
        if (!found) fail_field(f + ".id", "no stored item '" + id + "' (unknown or expired)");
        check_item(*found, f);
        r.conversation.push_back(std::move(*found));
        continue;
      }
      json checked = in;
      checked["type"] = check_item(in, f);  // an EasyInputMessage is a "message" item
      r.conversation.push_back(std::move(checked));
    }
  } else {
    fail_field("input", "must be a string or an array of input items");
  }
  parse_response_tools(body, r);
  r.chat.messages = to_messages(r.conversation, first_input, r.instructions);
  if (r.chat.messages.empty()) fail_field("input", "must hold at least one message");
  parse_sampling_fields(body, r.chat.sampling);
  r.max_output_tokens = opt_int(body, "max_output_tokens", 1, 1 << 30);
  r.chat.max_tokens = r.max_output_tokens;
  check_min_tokens(r.chat.sampling, r.max_output_tokens, "max_output_tokens");
  r.chat.stream = opt_bool(body, "stream").value_or(false);
  r.store = opt_bool(body, "store").value_or(true);
  r.background = opt_bool(body, "background").value_or(false);
  if (r.background && !r.store) fail_field("background", "requires store: true");
  if (r.background && r.chat.stream)
    fail_field("background", "streaming a background response is not supported");
  parse_reasoning(body, r);
  parse_text_format(body, r);
  check_extras(body, r);
  return r;
}

}  // namespace keel::server::openai
