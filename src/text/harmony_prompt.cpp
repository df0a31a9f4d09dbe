#include "text/harmony_prompt.h"

#include <chrono>
#include <ctime>
#include <map>

namespace keel {

using json = nlohmann::ordered_json;

namespace {

std::string str_of(const json &v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return {};
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string kwarg(const json &kwargs, const char *key, std::string fallback) {
  if (kwargs.is_object())
    if (auto it = kwargs.find(key); it != kwargs.end() && it->is_string())
      return it->get<std::string>();
  return fallback;
}

std::string effort_of(const json &kwargs) {
  const std::string e = kwarg(kwargs, "reasoning_effort", "medium");
  if (e == "minimal" || e == "none" || e == "low") return "low";
  if (e == "high" || e == "xhigh" || e == "max") return "high";
  return "medium";
}

std::string today_utc() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

// The properties of an object schema, one per line, each after its description.
std::string properties_of(const json &schema, int indent) {
  std::string out;
  const auto props = schema.find("properties");
  if (props == schema.end() || !props->is_object()) return out;
  std::vector<std::string> required;
  if (auto r = schema.find("required"); r != schema.end() && r->is_array())
    for (const auto &n : *r)
      if (n.is_string()) required.push_back(n.get<std::string>());
  const std::string pad(static_cast<std::size_t>(indent), ' ');
  for (const auto &[name, p] : props->items()) {
    if (p.is_object())
      if (auto d = p.find("description"); d != p.end() && d->is_string())
        out += pad + "// " + d->get<std::string>() + "\n";
    const bool req = std::find(required.begin(), required.end(), name) != required.end();
    out += pad + name + (req ? "" : "?") + ": " + harmony_type_of(p, indent) + ",";
    if (p.is_object())
      if (auto d = p.find("default"); d != p.end()) out += " // default: " + str_of(*d);
    out += "\n";
  }
  return out;
}

std::string function_type(const json &fn) {
  std::string out;
  if (auto d = fn.find("description"); d != fn.end() && d->is_string())
    out += "// " + d->get<std::string>() + "\n";
  const std::string name = fn.value("name", std::string());
  const auto params = fn.find("parameters");
  const bool none = params == fn.end() || !params->is_object() || !params->contains("properties") ||
                    !(*params)["properties"].is_object() || (*params)["properties"].empty();
  if (none) return out + "type " + name + " = () => any;\n";
  return out + "type " + name + " = (_: {\n" + properties_of(*params, 0) + "}) => any;\n";
}

// The tool-call name of a tool result: the call with its id, else the latest call.
std::string result_name(const json &messages, std::size_t upto, const json &tool_msg) {
  const std::string id = tool_msg.value("tool_call_id", std::string());
  std::string latest;
  for (std::size_t i = 0; i < upto; ++i) {
    const json &m = messages[i];
    auto calls = m.find("tool_calls");
    if (calls == m.end() || !calls->is_array()) continue;
    for (const auto &c : *calls) {
      const json fn = c.value("function", json::object());
      const std::string name = fn.value("name", std::string());
      if (!id.empty() && c.value("id", std::string()) == id) return name;
      latest = name;
    }
  }
  if (auto n = tool_msg.find("name"); n != tool_msg.end() && n->is_string())
    return n->get<std::string>();
  return latest;
}

}  // namespace

std::string harmony_type_of(const json &schema, int indent) {
  if (!schema.is_object()) return "any";
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array() && !e->empty()) {
    std::string out;
    for (const auto &v : *e) out += (out.empty() ? "" : " | ") + v.dump();
    return out;
  }
  for (const char *key : {"anyOf", "oneOf"})
    if (auto a = schema.find(key); a != schema.end() && a->is_array() && !a->empty()) {
      std::string out;
      for (const auto &s : *a) out += (out.empty() ? "" : " | ") + harmony_type_of(s, indent);
      return out;
    }
  const json t = schema.value("type", json());
  if (t.is_array()) {
    std::string out;
    for (const auto &x : t) {
      json one = schema;
      one["type"] = x;
      out += (out.empty() ? "" : " | ") + harmony_type_of(one, indent);
    }
    return out.empty() ? "any" : out;
  }
  const std::string type = t.is_string() ? t.get<std::string>() : "";
  if (type == "string") return "string";
  if (type == "number" || type == "integer") return "number";
  if (type == "boolean") return "boolean";
  if (type == "null") return "null";
  if (type == "array") {
    auto items = schema.find("items");
    return (items == schema.end() ? std::string("any") : harmony_type_of(*items, indent)) + "[]";
  }
  if (type == "object") {
    if (!schema.contains("properties")) return "object";
    return "{\n" + properties_of(schema, indent + 2) +
           std::string(static_cast<std::size_t>(indent), ' ') + "}";
  }
  return "any";
}

std::string render_harmony_prompt(const json &messages, const json &tools,
                                  bool add_generation_prompt, const json &kwargs) {
  const bool has_tools = tools.is_array() && !tools.empty();
  std::string out = "<|start|>system<|message|>" +
                    kwarg(kwargs, "model_identity",
                          "You are ChatGPT, a large language model trained by OpenAI.") +
                    "\nKnowledge cutoff: " + kwarg(kwargs, "knowledge_cutoff", "2024-06") +
                    "\nCurrent date: " + kwarg(kwargs, "current_date", today_utc()) +
                    "\n\nReasoning: " + effort_of(kwargs) +
                    "\n\n# Valid channels: analysis, commentary, final. Channel must be "
                    "included for every message.";
  if (has_tools) out += "\nCalls to these tools must go to the commentary channel: 'functions'.";
  out += "<|end|>";

  std::string instructions;
  for (const auto &m : messages) {
    const std::string role = m.value("role", std::string());
    if (role != "system" && role != "developer") continue;
    const std::string text = str_of(m.value("content", json()));
    if (text.empty()) continue;
    instructions += (instructions.empty() ? "" : "\n\n") + text;
  }
  if (!instructions.empty() || has_tools) {
    out += "<|start|>developer<|message|>";
    if (!instructions.empty()) out += "# Instructions\n\n" + instructions;
    if (has_tools) {
      if (!instructions.empty()) out += "\n\n";
      out += "# Tools\n\n## functions\n\nnamespace functions {\n\n";
      for (const auto &t : tools)
        if (t.is_object() && t.contains("function")) out += function_type(t["function"]) + "\n";
      out += "} // namespace functions";
    }
    out += "<|end|>";
  }

  // Reasoning is kept only after the last user message: the turn still in progress.
  std::size_t last_user = 0;
  for (std::size_t i = 0; i < messages.size(); ++i)
    if (messages[i].value("role", std::string()) == "user") last_user = i;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const json &m = messages[i];
    const std::string role = m.value("role", std::string());
    const std::string content = str_of(m.value("content", json()));
    if (role == "user") {
      out += "<|start|>user<|message|>" + content + "<|end|>";
    } else if (role == "assistant") {
      const std::string thought = str_of(m.value("reasoning_content", json()));
      const auto calls = m.find("tool_calls");
      const bool calling = calls != m.end() && calls->is_array() && !calls->empty();
      if (!thought.empty() && i > last_user)
        out += "<|start|>assistant<|channel|>analysis<|message|>" + thought + "<|end|>";
      if (calling) {
        if (!content.empty())  // a preamble before the calls
          out += "<|start|>assistant<|channel|>commentary<|message|>" + content + "<|end|>";
        for (const auto &c : *calls) {
          const json fn = c.value("function", json::object());
          out += "<|start|>assistant<|channel|>commentary to=functions." +
                 fn.value("name", std::string()) + " <|constrain|>json<|message|>" +
                 str_of(fn.value("arguments", json::object())) + "<|call|>";
        }
      } else if (!content.empty() || thought.empty()) {
        out += "<|start|>assistant<|channel|>final<|message|>" + content + "<|end|>";
      }
    } else if (role == "tool") {
      out += "<|start|>functions." + result_name(messages, i, m) +
             " to=assistant<|channel|>commentary<|message|>" + content + "<|end|>";
    }
  }
  if (add_generation_prompt) out += "<|start|>assistant";
  return out;
}

}  // namespace keel
