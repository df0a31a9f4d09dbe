#include "server/json_fields.h"
#include "server/openai/openai_structured.h"
#include "server/openai/openai_types.h"
#include "server/sampling_fields.h"

namespace keel::server::openai {

using json = nlohmann::ordered_json;

namespace {

// Content: a string, or an array of parts of which text parts are kept.
std::string flatten_content(const json &content, const std::string &field) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) fail_field(field, "must be a string or an array of content parts");
  std::string out;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const auto &part = content[i];
    const std::string pf = field + "[" + std::to_string(i) + "]";
    if (!part.is_object()) fail_field(pf, "must be an object");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) fail_field(pf + ".type", "is required");
    if (*type == "text") {
      auto t = part.find("text");
      if (t == part.end() || !t->is_string()) fail_field(pf + ".text", "must be a string");
      out += t->get<std::string>();
    } else {
      fail_field(pf + ".type",
                 "'" + type->get<std::string>() + "' content is not supported (text only)");
    }
  }
  return out;
}

void parse_common(const json &body, SamplingParams &s, std::optional<std::int64_t> &max_tokens,
                  int &n, std::vector<std::string> &stop, bool &stream, bool &include_usage,
                  const char *max_field) {
  parse_sampling_fields(body, s);
  std::optional<std::int64_t> mt = opt_int(body, max_field, 1, 1 << 30);
  if (!mt && std::string(max_field) == "max_completion_tokens")
    mt = opt_int(body, "max_tokens", 1, 1 << 30);
  max_tokens = mt;
  check_min_tokens(s, mt, max_field);
  if (auto v = opt_int(body, "n", 1, 16)) n = static_cast<int>(*v);
  stop = parse_stop_field(body, "stop", 16);
  stream = opt_bool(body, "stream").value_or(false);
  auto so = body.find("stream_options");
  if (so != body.end() && !so->is_null()) {
    if (!so->is_object()) fail_field("stream_options", "must be an object");
    if (!stream) fail_field("stream_options", "is only allowed when stream is true");
    for (const char *k : {"include_usage", "include_obfuscation"}) {
      auto v = so->find(k);
      if (v != so->end() && !v->is_null() && !v->is_boolean())
        fail_field(std::string("stream_options.") + k, "must be a boolean");
    }
    // include_obfuscation is accepted: keel sends no obfuscation padding.
    auto iu = so->find("include_usage");
    include_usage = iu != so->end() && iu->is_boolean() && iu->get<bool>();
  }
}

// Fields both endpoints know but need not act on, checked for their types; and
// logit_bias, which keel cannot honour and which would change the answer.
//
// Unknown fields are ignored, on purpose: clients and SDKs send newer or vendor
// fields (extra_body; vLLM's top_k, min_p, repetition_penalty are read), and failing
// on them would break clients for no gain. A field keel knows but cannot honour is
// rejected when ignoring it would silently change the answer (logit_bias, functions,
// audio, web_search_options, suffix, best_of != n),
// and accepted when it is only a hint (user, store, metadata, service_tier,
// parallel_tool_calls, reasoning_effort, prediction, prompt_cache_key).
void check_common_extras(const json &body) {
  for (const char *f : {"user", "service_tier", "prompt_cache_key", "safety_identifier"})
    opt_string(body, f);
  opt_bool(body, "store");
  auto md = body.find("metadata");
  if (md != body.end() && !md->is_null()) {
    if (!md->is_object()) fail_field("metadata", "must be an object of strings");
    for (const auto &[k, v] : md->items())
      if (!v.is_string()) fail_field("metadata." + k, "must be a string");
  }
  auto lb = body.find("logit_bias");
  if (lb != body.end() && !lb->is_null()) {
    if (!lb->is_object()) fail_field("logit_bias", "must be an object of token id to bias");
    for (const auto &[k, v] : lb->items())
      if (!v.is_number() || v.get<double>() < -100 || v.get<double>() > 100)
        fail_field("logit_bias", "biases must be numbers between -100 and 100");
    if (!lb->empty()) fail_field("logit_bias", "is not supported");
  }
}

// chat_template_kwargs (vLLM's and SGLang's field) pass through to the template;
// reasoning_effort is passed too (gpt-oss templates read it) and, unless the kwargs
// say otherwise, turns thinking off for "none" and on for any other effort.
void parse_template_kwargs(const json &body, json &kwargs) {
  auto k = body.find("chat_template_kwargs");
  if (k != body.end() && !k->is_null()) {
    if (!k->is_object()) fail_field("chat_template_kwargs", "must be an object");
    kwargs = *k;
  }
  if (auto effort = opt_string(body, "reasoning_effort")) {
    if (!kwargs.contains("reasoning_effort")) kwargs["reasoning_effort"] = *effort;
    if (!kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = *effort != "none";
  }
}

}  // namespace

ChatRequest parse_chat(const json &body) {
  ChatRequest r;
  r.model = req_string(body, "model");
  parse_tools(body, r);
  auto msgs = body.find("messages");
  if (msgs == body.end() || msgs->is_null()) fail_field("messages", "is required");
  if (!msgs->is_array()) fail_field("messages", "must be an array");
  if (msgs->empty()) fail_field("messages", "must not be empty");
  r.messages = json::array();
  for (std::size_t i = 0; i < msgs->size(); ++i) {
    const auto &m = (*msgs)[i];
    const std::string f = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) fail_field(f, "must be an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      fail_field(f + ".role", "is required and must be a string");
    const std::string rs = role->get<std::string>();
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool" && rs != "developer")
      fail_field(f + ".role", "must be one of system, developer, user, assistant, tool");
    if (m.contains("name") && !m["name"].is_string() && !m["name"].is_null())
      fail_field(f + ".name", "must be a string");
    json out = m;
    out["role"] = rs == "developer" ? "system" : rs;
    auto c = m.find("content");
    const bool has_calls =
        rs == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
    // Only an assistant turn that calls tools may leave its content out.
    if ((c == m.end() || c->is_null()) && rs != "assistant")
      fail_field(f + ".content", "is required");
    out["content"] = flatten_content(c == m.end() ? json(nullptr) : *c, f + ".content");
    if (has_calls) {
      out["tool_calls"] = template_tool_calls(m["tool_calls"], f + ".tool_calls");
    } else if (m.contains("tool_calls") && rs != "assistant") {
      fail_field(f + ".tool_calls", "only assistant messages carry tool_calls");
    }
    if (rs == "tool") {
      auto id = m.find("tool_call_id");
      if (id == m.end() || !id->is_string())
        fail_field(f + ".tool_call_id", "is required in a tool message");
    }
    r.messages.push_back(std::move(out));
  }
  parse_common(body, r.sampling, r.max_tokens, r.n, r.stop, r.stream, r.include_usage,
               "max_completion_tokens");
  r.logprobs = opt_bool(body, "logprobs").value_or(false);
  if (auto v = opt_int(body, "top_logprobs", 0, 20)) {
    if (!r.logprobs) fail_field("top_logprobs", "requires logprobs to be true");
    r.top_logprobs = static_cast<int>(*v);
  }
  if (r.logprobs) r.sampling.logprobs = r.top_logprobs;
  parse_structured_output(body, r.sampling, /*allow_response_format=*/true);
  if (r.forces_tool_call() && !r.sampling.constraint_kind.empty())
    fail_field("tool_choice",
               "a forced tool call cannot be combined with response_format or "
               "structured_outputs");
  if (body.contains("functions") && !body["functions"].is_null())
    fail_field("functions", "is not supported: use tools");
  if (body.contains("function_call") && !body["function_call"].is_null())
    fail_field("function_call", "is not supported: use tool_choice");
  if (body.contains("audio") && !body["audio"].is_null())
    fail_field("audio", "audio output is not supported");
  if (body.contains("web_search_options") && !body["web_search_options"].is_null())
    fail_field("web_search_options", "web search is not supported");
  auto mod = body.find("modalities");
  if (mod != body.end() && !mod->is_null()) {
    if (!mod->is_array()) fail_field("modalities", "must be an array of strings");
    for (const auto &x : *mod)
      if (x != "text") fail_field("modalities", "only 'text' output is supported");
  }
  opt_string(body, "verbosity");
  parse_template_kwargs(body, r.template_kwargs);
  if (auto p = body.find("prediction"); p != body.end() && !p->is_null() && !p->is_object())
    fail_field("prediction", "must be an object");
  check_common_extras(body);
  return r;
}

CompletionRequest parse_completion(const json &body) {
  CompletionRequest r;
  r.model = req_string(body, "model");
  auto p = body.find("prompt");
  if (p == body.end() || p->is_null()) fail_field("prompt", "is required");
  auto is_token = [](const json &t) { return t.is_number_integer() || t.is_number_unsigned(); };
  auto token_list = [&](const json &arr, const std::string &f) {
    std::vector<TokenId> ids;
    for (const auto &t : arr) {
      if (!is_token(t)) fail_field(f, "token ids must be integers");
      auto v = t.get<std::int64_t>();
      if (v < 0 || v > INT32_MAX)
        fail_field(f, "token id " + std::to_string(v) + " is out of range");
      ids.push_back(static_cast<TokenId>(v));
    }
    if (ids.empty()) fail_field(f, "must not be empty");
    return ids;
  };
  if (p->is_string()) {
    r.text_prompts.push_back(p->get<std::string>());
  } else if (p->is_array()) {
    if (p->empty()) fail_field("prompt", "must not be empty");
    const json &first = (*p)[0];
    if (first.is_string()) {
      for (const auto &s : *p) {
        if (!s.is_string())
          fail_field("prompt", "an array prompt must hold only strings or only token ids");
        r.text_prompts.push_back(s.get<std::string>());
      }
    } else if (is_token(first)) {
      r.prompt_is_tokens = true;
      r.token_prompts.push_back(token_list(*p, "prompt"));
    } else if (first.is_array()) {
      r.prompt_is_tokens = true;
      for (std::size_t i = 0; i < p->size(); ++i) {
        if (!(*p)[i].is_array())
          fail_field("prompt", "an array of token-id arrays must hold only arrays");
        r.token_prompts.push_back(token_list((*p)[i], "prompt[" + std::to_string(i) + "]"));
      }
    } else {
      fail_field("prompt",
                 "must be a string, an array of strings, token ids, or arrays of token ids");
    }
  } else {
    fail_field("prompt",
               "must be a string, an array of strings, token ids, or arrays of token ids");
  }
  const std::size_t count = r.prompt_is_tokens ? r.token_prompts.size() : r.text_prompts.size();
  if (count > 64) fail_field("prompt", "at most 64 prompts in one request");
  parse_common(body, r.sampling, r.max_tokens, r.n, r.stop, r.stream, r.include_usage,
               "max_tokens");
  if (!r.max_tokens) r.max_tokens = 16;  // the OpenAI default for completions
  check_min_tokens(r.sampling, r.max_tokens, "max_tokens");
  r.echo = opt_bool(body, "echo").value_or(false);
  if (auto v = opt_int(body, "logprobs", 0, 20)) r.logprobs = static_cast<int>(*v);
  r.sampling.logprobs = r.logprobs;
  r.sampling.prompt_logprobs = r.echo && r.logprobs >= 0;
  if (auto v = opt_int(body, "best_of", 1, 16); v && *v != r.n)
    fail_field("best_of", "only best_of == n is supported");
  if (opt_string(body, "suffix")) fail_field("suffix", "is not supported");
  parse_structured_output(body, r.sampling, /*allow_response_format=*/false);
  check_common_extras(body);
  return r;
}

}  // namespace keel::server::openai
