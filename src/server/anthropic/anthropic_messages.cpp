#include <algorithm>
#include <cctype>

#include "server/anthropic/anthropic_types.h"
#include "server/api_error.h"
#include "server/forced_tool_call.h"
#include "server/json_fields.h"
#include "server/openai/openai_structured.h"
#include "server/sampling_fields.h"

namespace keel::server::anthropic {

using json = nlohmann::ordered_json;

namespace {

// Text of a string or of text blocks (system prompts, tool results).
std::string text_of(const json &content, const std::string &field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) fail_field(field, "must be a string or an array of text blocks");
  std::string out;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const auto &b = content[i];
    const std::string bf = field + "." + std::to_string(i);
    if (!b.is_object()) fail_field(bf, "must be an object");
    auto type = b.find("type");
    if (type == b.end() || !type->is_string()) fail_field(bf + ".type", "is required");
    if (*type != "text")
      fail_field(bf + ".type",
                 "'" + type->get<std::string>() + "' blocks are not supported here (text only)");
    auto t = b.find("text");
    if (t == b.end() || !t->is_string()) fail_field(bf + ".text", "must be a string");
    out += t->get<std::string>();
  }
  return out;
}

std::string block_type(const json &b, const std::string &bf) {
  if (!b.is_object()) fail_field(bf, "must be an object");
  auto type = b.find("type");
  if (type == b.end() || !type->is_string()) fail_field(bf + ".type", "is required");
  return type->get<std::string>();
}

[[noreturn]] void unsupported_block(const std::string &bf, const std::string &type) {
  fail_field(bf + ".type",
             "'" + type + "' blocks are not supported" +
                 (type == "image" || type == "document" ? " (text models only)" : ""));
}

// A user turn: tool_result blocks become role "tool" messages (first, as Anthropic
// requires them first and templates want them right after the assistant's calls),
// then the text as one user message.
void push_user(const json &content, const std::string &f, json &out) {
  if (content.is_string()) {
    out.push_back({{"role", "user"}, {"content", content}});
    return;
  }
  if (!content.is_array()) fail_field(f, "must be a string or an array of content blocks");
  std::string text;
  bool any_text = false;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const auto &b = content[i];
    const std::string bf = f + "." + std::to_string(i);
    const std::string type = block_type(b, bf);
    if (type == "text") {
      auto t = b.find("text");
      if (t == b.end() || !t->is_string()) fail_field(bf + ".text", "must be a string");
      text += t->get<std::string>();
      any_text = true;
    } else if (type == "tool_result") {
      auto id = b.find("tool_use_id");
      if (id == b.end() || !id->is_string()) fail_field(bf + ".tool_use_id", "is required");
      opt_bool(b, "is_error");
      auto c = b.find("content");
      const std::string result =
          c == b.end() || c->is_null() ? std::string() : text_of(*c, bf + ".content");
      out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
    } else if (type == "tool_use" || type == "thinking" || type == "redacted_thinking") {
      fail_field(bf + ".type", "'" + type + "' blocks belong in assistant turns");
    } else {
      unsupported_block(bf, type);
    }
  }
  if (any_text || content.empty()) out.push_back({{"role", "user"}, {"content", text}});
}

// An assistant turn: text, and tool_use blocks as OpenAI-shaped tool_calls (input as
// an object, which templates print with tojson). Thinking blocks become the message's
// reasoning_content, which templates that keep reasoning (Qwen3) render and others
// ignore; redacted thinking carries nothing keel can read.
void push_assistant(const json &content, const std::string &f, json &out) {
  if (content.is_string()) {
    out.push_back({{"role", "assistant"}, {"content", content}});
    return;
  }
  if (!content.is_array()) fail_field(f, "must be a string or an array of content blocks");
  std::string text, reasoning;
  json calls = json::array();
  for (std::size_t i = 0; i < content.size(); ++i) {
    const auto &b = content[i];
    const std::string bf = f + "." + std::to_string(i);
    const std::string type = block_type(b, bf);
    if (type == "text") {
      auto t = b.find("text");
      if (t == b.end() || !t->is_string()) fail_field(bf + ".text", "must be a string");
      text += t->get<std::string>();
    } else if (type == "thinking") {
      auto t = b.find("thinking");
      if (t == b.end() || !t->is_string()) fail_field(bf + ".thinking", "must be a string");
      if (b.contains("signature") && !b["signature"].is_string())
        fail_field(bf + ".signature", "must be a string");
      reasoning += t->get<std::string>();
    } else if (type == "redacted_thinking") {
      if (!b.contains("data") || !b["data"].is_string())
        fail_field(bf + ".data", "must be a string");
    } else if (type == "tool_use") {
      auto id = b.find("id");
      if (id == b.end() || !id->is_string()) fail_field(bf + ".id", "is required");
      auto name = b.find("name");
      if (name == b.end() || !name->is_string()) fail_field(bf + ".name", "is required");
      auto input = b.find("input");
      if (input == b.end() || !input->is_object()) fail_field(bf + ".input", "must be an object");
      calls.push_back({{"id", *id},
                       {"type", "function"},
                       {"function", {{"name", *name}, {"arguments", *input}}}});
    } else if (type == "tool_result") {
      fail_field(bf + ".type", "'tool_result' blocks belong in user turns");
    } else {
      unsupported_block(bf, type);
    }
  }
  json m{{"role", "assistant"}, {"content", text}};
  if (!reasoning.empty()) m["reasoning_content"] = std::move(reasoning);
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  out.push_back(std::move(m));
}

bool valid_tool_name(const std::string &s) {
  if (s.empty() || s.size() > 128) return false;
  for (unsigned char c : s)
    if (!std::isalnum(c) && c != '_' && c != '-') return false;
  return true;
}

void parse_tools(const json &body, MessagesRequest &r) {
  auto tools = body.find("tools");
  if (tools != body.end() && !tools->is_null()) {
    if (!tools->is_array()) fail_field("tools", "must be an array");
    if (tools->size() > 512) fail_field("tools", "at most 512 tools");
    r.tools = json::array();
    for (std::size_t i = 0; i < tools->size(); ++i) {
      const json &t = (*tools)[i];
      const std::string f = "tools." + std::to_string(i);
      if (!t.is_object()) fail_field(f, "must be an object");
      auto type = t.find("type");
      if (type != t.end() && !type->is_null() && *type != "custom")
        fail_field(f + ".type", "'" +
                                    (type->is_string() ? type->get<std::string>() : type->dump()) +
                                    "' tools are not supported (only custom tools)");
      auto name = t.find("name");
      if (name == t.end() || !name->is_string() || !valid_tool_name(name->get<std::string>()))
        fail_field(f + ".name", "is required: 1 to 128 letters, digits, underscores or dashes");
      auto schema = t.find("input_schema");
      if (schema == t.end() || !schema->is_object())
        fail_field(f + ".input_schema", "is required and must be a JSON Schema object");
      // Hints keel takes every tool eagerly for: all tools are in the prompt.
      if (t.contains("defer_loading") && !t["defer_loading"].is_null() &&
          !t["defer_loading"].is_boolean())
        fail_field(f + ".defer_loading", "must be a boolean");
      if (t.contains("cache_control") && !t["cache_control"].is_null() &&
          !t["cache_control"].is_object())
        fail_field(f + ".cache_control", "must be an object");
      json fn{{"name", *name}};
      if (auto d = opt_string(t, "description")) fn["description"] = *d;
      fn["parameters"] = *schema;
      r.tools.push_back({{"type", "function"}, {"function", std::move(fn)}});
      r.tool_names.push_back(name->get<std::string>());
    }
  }
  auto tc = body.find("tool_choice");
  if (tc == body.end() || tc->is_null()) return;
  if (!tc->is_object()) fail_field("tool_choice", "must be an object");
  auto type = tc->find("type");
  if (type == tc->end() || !type->is_string()) fail_field("tool_choice.type", "is required");
  const std::string t = type->get<std::string>();
  if (t != "auto" && t != "any" && t != "tool" && t != "none")
    fail_field("tool_choice.type", "must be auto, any, tool or none");
  opt_bool(*tc, "disable_parallel_tool_use");  // a hint: keel takes every call written
  if (t == "tool") {
    auto name = tc->find("name");
    if (name == tc->end() || !name->is_string()) fail_field("tool_choice.name", "is required");
    const std::string n = name->get<std::string>();
    if (std::find(r.tool_names.begin(), r.tool_names.end(), n) == r.tool_names.end())
      fail_field("tool_choice.name", "'" + n + "' is not one of the request's tools");
    r.tool_choice_name = n;
  }
  if (r.tool_names.empty() && t != "none")
    fail_field("tool_choice", "is only allowed when tools are given");
  // A forced call is constrained to the allowed tools' input schemas: one the grammar
  // engine refuses is the client's error, named where it wrote it.
  if (t == "any" || t == "tool")
    for (std::size_t i = 0; i < r.tools.size(); ++i) {
      const json &fn = r.tools[i]["function"];
      if (t == "tool" && fn["name"] != r.tool_choice_name) continue;
      openai::check_constraint(
          {grammar::ConstraintKind::kJsonSchema, forced_tool_parameters(fn).dump()},
          "tools." + std::to_string(i) + ".input_schema");
    }
  r.tool_choice = t;
}

// Fields keel knows but need not act on are type-checked; fields that would change
// the answer and that keel cannot honour are rejected. Unknown fields are ignored
// (the same policy as the OpenAI endpoints): proxies and SDKs add newer or vendor
// fields, and failing on them breaks clients for no gain.
void check_extras(const json &body, MessagesRequest &r) {
  auto md = body.find("metadata");
  if (md != body.end() && !md->is_null()) {
    if (!md->is_object()) fail_field("metadata", "must be an object");
    auto uid = md->find("user_id");
    if (uid != md->end() && !uid->is_null() && !uid->is_string())
      fail_field("metadata.user_id", "must be a string");
  }
  auto oc = body.find("output_config");
  if (oc != body.end() && !oc->is_null()) {
    if (!oc->is_object()) fail_field("output_config", "must be an object");
    auto e = oc->find("effort");
    if (e != oc->end() && !e->is_null()) {
      if (!e->is_string()) fail_field("output_config.effort", "must be a string");
      r.effort = e->get<std::string>();
    }
    auto f = oc->find("format");
    if (f != oc->end() && !f->is_null()) {
      if (!f->is_object() || f->value("type", "") != "json_schema")
        fail_field("output_config.format.type", "must be 'json_schema'");
      auto schema = f->find("schema");
      if (schema == f->end() || !schema->is_object())
        fail_field("output_config.format.schema", "is required and must be a JSON Schema object");
      openai::set_json_schema_constraint(r.sampling, *schema, "output_config.format.schema");
    }
  }
  auto th = body.find("thinking");
  if (th != body.end() && !th->is_null()) {
    if (!th->is_object()) fail_field("thinking", "must be an object");
    auto type = th->find("type");
    if (type == th->end() || !type->is_string() ||
        (*type != "enabled" && *type != "disabled" && *type != "adaptive"))
      fail_field("thinking.type", "must be 'enabled', 'disabled' or 'adaptive'");
    r.thinking = type->get<std::string>();
    if (r.thinking == "enabled") {
      auto b = opt_int(*th, "budget_tokens", 1, 1 << 30);
      if (!b) fail_field("thinking.budget_tokens", "is required when thinking is enabled");
      r.thinking_budget = *b;
    }
    // summarized, omitted, updates (Claude Code), ...: only omitted changes the output.
    r.thinking_omitted = opt_string(*th, "display").value_or("") == "omitted";
  }
  // Only a hint here: keel's context is the prompt it is given (clients trim it).
  if (auto cm = body.find("context_management");
      cm != body.end() && !cm->is_null() && !cm->is_object())
    fail_field("context_management", "must be an object");
  opt_string(body, "service_tier");
  for (const char *f : {"mcp_servers", "container"})
    if (body.contains(f) && !body[f].is_null()) fail_field(f, "is not supported");
  // The Anthropic API thinks only when asked; templates whose models think by default
  // (Qwen3) are told so.
  r.template_kwargs["enable_thinking"] = r.thinking == "enabled" || r.thinking == "adaptive";
  // gpt-oss cannot stop reasoning, only reason less: its reasoning effort is the
  // request's effort, else from the thinking budget (<= 2,048 low, >= 16,384 high), else
  // low when thinking is off and medium (harmony's default) when it is not said.
  std::string effort = r.effort;
  if (effort.empty() && r.thinking == "enabled")
    effort = r.thinking_budget <= 2048 ? "low" : r.thinking_budget >= 16384 ? "high" : "medium";
  if (effort.empty() && r.thinking == "disabled") effort = "low";
  if (!effort.empty()) r.template_kwargs["reasoning_effort"] = effort;
}

}  // namespace

MessagesRequest parse_messages(const json &body, bool for_count_tokens) {
  MessagesRequest r;
  r.model = req_string(body, "model");
  if (auto mt = opt_int(body, "max_tokens", 1, 1 << 30))
    r.sampling.max_tokens = static_cast<int32_t>(*mt);
  else if (!for_count_tokens)
    fail_field("max_tokens", "is required");
  parse_tools(body, r);
  r.messages = json::array();
  // The system prompt: the top-level field, then each system entry of messages (as
  // Claude Code sends them), in order, merged into the one system turn templates take.
  std::string system;
  bool any_system = false;
  auto add_system = [&](const std::string &text) {
    if (any_system && !system.empty() && !text.empty()) system += "\n\n";
    system += text;
    any_system = true;
  };
  auto sys = body.find("system");
  if (sys != body.end() && !sys->is_null()) add_system(text_of(*sys, "system"));
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
    if (*role != "user" && *role != "assistant" && *role != "system")
      fail_field(f + ".role", "must be 'user', 'assistant' or 'system'");
    auto c = m.find("content");
    if (c == m.end() || c->is_null()) fail_field(f + ".content", "is required");
    if (*role == "system")
      add_system(text_of(*c, f + ".content"));
    else if (*role == "user")
      push_user(*c, f + ".content", r.messages);
    else
      push_assistant(*c, f + ".content", r.messages);
  }
  if (any_system)
    r.messages.insert(r.messages.begin(), json{{"role", "system"}, {"content", system}});
  if (r.messages.empty() || r.messages.back().value("role", "") == "system")
    fail_field("messages", "must hold at least one user or assistant turn");
  // Sampling: Anthropic's temperature range is [0, 1].
  if (auto v = opt_number(body, "temperature", 0.0, 1.0))
    r.sampling.temperature = static_cast<float>(*v);
  json rest = body;
  rest.erase("temperature");
  parse_sampling_fields(rest, r.sampling);
  if (!for_count_tokens) check_min_tokens(r.sampling, r.sampling.max_tokens, "max_tokens");
  // An array of strings (a bare string is OpenAI's shape, not Anthropic's).
  if (auto ss = body.find("stop_sequences"); ss != body.end() && !ss->is_null() && !ss->is_array())
    fail_field("stop_sequences", "must be an array of strings");
  r.stop_sequences = parse_stop_field(body, "stop_sequences", 16);
  r.stream = opt_bool(body, "stream").value_or(false);
  check_extras(body, r);
  if (r.forces_tool_call() && !r.sampling.constraint_kind.empty())
    fail_field("tool_choice", "a forced tool call cannot be combined with output_config.format");
  return r;
}

}  // namespace keel::server::anthropic
