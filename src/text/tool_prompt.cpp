#include "text/tool_prompt.h"

#include <string>

#include "core/bounded_json.h"

namespace keel {

using json = nlohmann::ordered_json;

namespace {

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string content_of(const json &m) {
  auto c = m.find("content");
  return c != m.end() && c->is_string() ? c->get<std::string>() : std::string();
}

// A call's arguments as a JSON value (templates get objects; clients may send strings).
json arguments_of(const json &call) {
  const json fn = call.value("function", json::object());
  json args = fn.value("arguments", json::object());
  if (args.is_string()) {
    // A client's text: parsed under the request limits (depth, keys) or kept a string.
    if (auto parsed = parse_bounded_json<json>(args.get_ref<const std::string &>()))
      return std::move(*parsed);
  }
  return args;
}

std::string call_name(const json &call) {
  return call.value("function", json::object()).value("name", std::string());
}

std::string hermes_system(const json &tools) {
  std::string s =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const auto &t : tools) s += "\n" + dump(t);
  s += "\n</tools>\n\nFor each function call, return a json object with function name and "
       "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
       "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  return s;
}

std::string llama3_system(const json &tools) {
  std::string s =
      "Environment: ipython\n\nGiven the following functions, please respond with a JSON for "
      "a function call with its proper arguments that best answers the given prompt.\n\n"
      "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument "
      "name and its value}. Do not use variables.\n";
  for (const auto &t : tools) s += "\n" + dump(t) + "\n";
  return s;
}

std::string calls_text(const json &calls, ToolCallFormat format) {
  std::string s;
  if (format == ToolCallFormat::kMistral) {
    json arr = json::array();
    for (const auto &c : calls)
      arr.push_back({{"name", call_name(c)}, {"arguments", arguments_of(c)}});
    return "[TOOL_CALLS]" + dump(arr);
  }
  for (const auto &c : calls) {
    if (format == ToolCallFormat::kLlama3Json) {
      if (!s.empty()) s += "; ";
      s += dump({{"name", call_name(c)}, {"parameters", arguments_of(c)}});
    } else {
      if (!s.empty()) s += "\n";
      s += "<tool_call>\n" + dump({{"name", call_name(c)}, {"arguments", arguments_of(c)}}) +
           "\n</tool_call>";
    }
  }
  return s;
}

std::string result_text(const json &m, ToolCallFormat format) {
  const std::string c = content_of(m);
  if (format == ToolCallFormat::kMistral)
    return "[TOOL_RESULTS]" +
           dump({{"call_id", m.value("tool_call_id", std::string())}, {"content", c}}) +
           "[/TOOL_RESULTS]";
  if (format == ToolCallFormat::kLlama3Json) return c;
  return "<tool_response>\n" + c + "\n</tool_response>";
}

}  // namespace

json inject_tool_prompt(const json &messages, const json &tools, ToolCallFormat format) {
  json out = json::array();
  bool last_was_tool = false;
  for (const auto &m : messages) {
    const std::string role = m.value("role", std::string());
    if (role == "tool") {
      // Consecutive results go into one user turn, so roles still alternate.
      const std::string r = result_text(m, format);
      if (last_was_tool)
        out.back()["content"] = content_of(out.back()) + "\n" + r;
      else
        out.push_back({{"role", "user"}, {"content", r}});
      last_was_tool = true;
      continue;
    }
    last_was_tool = false;
    json copy = m;
    if (role == "assistant" && m.contains("tool_calls") && m["tool_calls"].is_array() &&
        !m["tool_calls"].empty()) {
      std::string text = content_of(m);
      const std::string calls = calls_text(m["tool_calls"], format);
      copy["content"] = text.empty() ? calls : text + "\n" + calls;
      copy.erase("tool_calls");
    }
    out.push_back(std::move(copy));
  }
  if (!tools.is_array() || tools.empty()) return out;

  if (format == ToolCallFormat::kMistral) {
    // Before the last user turn, as Mistral's own templates place it.
    const std::string block = "[AVAILABLE_TOOLS]" + dump(tools) + "[/AVAILABLE_TOOLS]";
    for (auto it = out.rbegin(); it != out.rend(); ++it)
      if (it->value("role", std::string()) == "user") {
        (*it)["content"] = block + content_of(*it);
        return out;
      }
    out.push_back({{"role", "user"}, {"content", block}});
    return out;
  }
  const std::string block =
      format == ToolCallFormat::kLlama3Json ? llama3_system(tools) : hermes_system(tools);
  if (!out.empty() && out[0].value("role", std::string()) == "system") {
    const std::string sys = content_of(out[0]);
    out[0]["content"] = sys.empty() ? block : sys + "\n\n" + block;
  } else {
    out.insert(out.begin(), json{{"role", "system"}, {"content", block}});
  }
  return out;
}

}  // namespace keel
