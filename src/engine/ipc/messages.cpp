#include "engine/ipc/messages.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace keel::ipc {

using nlohmann::json;

namespace {

json parse(const std::string &payload, const char *what) {
  try {
    return json::parse(payload);
  } catch (const json::exception &e) {
    throw Error(ErrorCode::kFormat, std::string("ipc ") + what + ": " + e.what());
  }
}

template <typename F>
auto guarded(const char *what, F &&f) {
  try {
    return f();
  } catch (const json::exception &e) {
    throw Error(ErrorCode::kFormat, std::string("ipc ") + what + ": " + e.what());
  }
}

json lp_json(const TokenLogprob &lp) { return json::array({lp.token, lp.logprob}); }
TokenLogprob lp_from(const json &j) { return {j.at(0).get<TokenId>(), j.at(1).get<float>()}; }

json lp_list(const std::vector<TokenLogprob> &v) {
  json a = json::array();
  for (const auto &lp : v) a.push_back(lp_json(lp));
  return a;
}
std::vector<TokenLogprob> lp_list_from(const json &j) {
  std::vector<TokenLogprob> v;
  for (const auto &e : j) v.push_back(lp_from(e));
  return v;
}

}  // namespace

std::string encode_ready(const ReadyInfo &info) {
  return json{{"context_length", info.context_length},
              {"vocab_size", info.vocab_size},
              {"eos", info.eos_token_ids},
              {"memory_bytes", info.memory_bytes},
              {"pid", info.pid},
              {"backend", info.backend},
              {"memory",
               {{"weights", info.weights_bytes},
                {"kv", info.kv_bytes},
                {"workspace", info.workspace_bytes},
                {"host_tier", info.host_tier_bytes},
                {"kv_block_size", info.kv_block_size},
                {"device_total", info.device_total_bytes},
                {"kv_rule", info.kv_rule},
                {"weights_format", info.weights_format}}}}
      .dump();
}

ReadyInfo decode_ready(const std::string &payload) {
  const json j = parse(payload, "hello");
  return guarded("hello", [&] {
    ReadyInfo r;
    r.context_length = j.at("context_length").get<std::int64_t>();
    r.vocab_size = j.at("vocab_size").get<std::int64_t>();
    r.eos_token_ids = j.at("eos").get<std::vector<TokenId>>();
    r.memory_bytes = j.at("memory_bytes").get<std::int64_t>();
    r.pid = j.at("pid").get<std::int64_t>();
    r.backend = j.at("backend").get<std::string>();
    if (const auto m = j.find("memory"); m != j.end()) {
      r.weights_bytes = m->value("weights", std::int64_t{0});
      r.kv_bytes = m->value("kv", std::int64_t{0});
      r.workspace_bytes = m->value("workspace", std::int64_t{0});
      r.host_tier_bytes = m->value("host_tier", std::int64_t{0});
      r.kv_block_size = m->value("kv_block_size", std::int64_t{0});
      r.device_total_bytes = m->value("device_total", std::int64_t{0});
      r.kv_rule = m->value("kv_rule", std::string());
      r.weights_format = m->value("weights_format", std::string());
    }
    return r;
  });
}

std::string encode_submit(const GenerationRequest &r) {
  const auto &s = r.sampling;
  json sp{{"temperature", s.temperature},
          {"top_k", s.top_k},
          {"top_p", s.top_p},
          {"min_p", s.min_p},
          {"repetition_penalty", s.repetition_penalty},
          {"presence_penalty", s.presence_penalty},
          {"frequency_penalty", s.frequency_penalty},
          {"max_tokens", s.max_tokens},
          {"stop_token_ids", s.stop_token_ids},
          {"stop_strings", s.stop_strings},
          {"ignore_eos", s.ignore_eos},
          {"logprobs", s.logprobs},
          {"prompt_logprobs", s.prompt_logprobs}};
  if (s.seed) sp["seed"] = *s.seed;
  if (s.min_tokens != 0) sp["min_tokens"] = s.min_tokens;
  if (!s.speculative) sp["speculative"] = false;
  if (!s.constraint_kind.empty()) {
    sp["constraint_kind"] = s.constraint_kind;
    sp["constraint_text"] = s.constraint_text;
  }
  if (s.thinking_budget >= 0)
    sp["thinking"] = {{"budget", s.thinking_budget},
                      {"start", s.thinking_start},
                      {"end", s.thinking_end},
                      {"open", s.thinking_open}};
  json j{{"id", r.id.value}, {"prompt", r.prompt}, {"sampling", sp}};
  if (r.group != 0) j["group"] = r.group;
  if (r.deadline) {
    // Deadlines cross the process boundary as a remaining duration: the clocks differ.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        *r.deadline - std::chrono::steady_clock::now());
    j["deadline_ms"] = std::max<std::int64_t>(0, left.count());
  }
  return j.dump();
}

GenerationRequest decode_submit(const std::string &payload) {
  const json j = parse(payload, "submit");
  return guarded("submit", [&] {
    GenerationRequest r;
    r.id = RequestId(j.at("id").get<std::uint64_t>());
    r.prompt = j.at("prompt").get<std::vector<TokenId>>();
    if (j.contains("group")) r.group = j.at("group").get<std::uint64_t>();
    const json &sp = j.at("sampling");
    auto &s = r.sampling;
    s.temperature = sp.at("temperature").get<float>();
    s.top_k = sp.at("top_k").get<std::int32_t>();
    s.top_p = sp.at("top_p").get<float>();
    s.min_p = sp.at("min_p").get<float>();
    s.repetition_penalty = sp.at("repetition_penalty").get<float>();
    s.presence_penalty = sp.at("presence_penalty").get<float>();
    s.frequency_penalty = sp.at("frequency_penalty").get<float>();
    s.max_tokens = sp.at("max_tokens").get<std::int32_t>();
    s.stop_token_ids = sp.at("stop_token_ids").get<std::vector<TokenId>>();
    s.stop_strings = sp.at("stop_strings").get<std::vector<std::string>>();
    s.ignore_eos = sp.at("ignore_eos").get<bool>();
    s.logprobs = sp.at("logprobs").get<std::int32_t>();
    s.prompt_logprobs = sp.at("prompt_logprobs").get<bool>();
    if (sp.contains("seed")) s.seed = sp.at("seed").get<std::uint64_t>();
    if (sp.contains("min_tokens")) s.min_tokens = sp.at("min_tokens").get<std::int32_t>();
    if (sp.contains("speculative")) s.speculative = sp.at("speculative").get<bool>();
    if (sp.contains("constraint_kind")) {
      s.constraint_kind = sp.at("constraint_kind").get<std::string>();
      s.constraint_text = sp.at("constraint_text").get<std::string>();
    }
    if (sp.contains("thinking")) {
      const json &t = sp.at("thinking");
      s.thinking_budget = t.at("budget").get<std::int32_t>();
      s.thinking_start = t.at("start").get<std::vector<TokenId>>();
      s.thinking_end = t.at("end").get<std::vector<TokenId>>();
      s.thinking_open = t.at("open").get<bool>();
    }
    if (j.contains("deadline_ms"))
      r.deadline = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(j.at("deadline_ms").get<std::int64_t>());
    return r;
  });
}

std::string encode_abort(RequestId id) { return json{{"id", id.value}}.dump(); }

RequestId decode_abort(const std::string &payload) {
  const json j = parse(payload, "abort");
  return guarded("abort", [&] { return RequestId(j.at("id").get<std::uint64_t>()); });
}

std::string encode_event(const RequestEvent &e) {
  json j{{"id", e.id.value}, {"tokens", e.tokens}};
  if (!e.sampled_logprobs.empty()) j["lp"] = lp_list(e.sampled_logprobs);
  if (!e.top_logprobs.empty()) {
    json a = json::array();
    for (const auto &v : e.top_logprobs) a.push_back(lp_list(v));
    j["top"] = std::move(a);
  }
  if (!e.prompt_logprobs.empty()) {
    json a = json::array();
    for (const auto &o : e.prompt_logprobs) a.push_back(o ? lp_json(*o) : json(nullptr));
    j["plp"] = std::move(a);
  }
  if (!e.prompt_top_logprobs.empty()) {
    json a = json::array();
    for (const auto &v : e.prompt_top_logprobs) a.push_back(lp_list(v));
    j["ptop"] = std::move(a);
  }
  if (e.cached_prompt_tokens) j["cached"] = e.cached_prompt_tokens;
  if (e.stored_prompt_tokens) j["stored"] = e.stored_prompt_tokens;
  if (e.finish) j["finish"] = static_cast<int>(*e.finish);
  if (!e.error.empty()) j["error"] = e.error;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

RequestEvent decode_event(const std::string &payload) {
  const json j = parse(payload, "event");
  return guarded("event", [&] {
    RequestEvent e;
    e.id = RequestId(j.at("id").get<std::uint64_t>());
    e.tokens = j.at("tokens").get<std::vector<TokenId>>();
    if (j.contains("lp")) e.sampled_logprobs = lp_list_from(j["lp"]);
    if (j.contains("top"))
      for (const auto &v : j["top"]) e.top_logprobs.push_back(lp_list_from(v));
    if (j.contains("plp"))
      for (const auto &o : j["plp"]) {
        if (o.is_null())
          e.prompt_logprobs.emplace_back(std::nullopt);
        else
          e.prompt_logprobs.emplace_back(lp_from(o));
      }
    if (j.contains("ptop"))
      for (const auto &v : j["ptop"]) e.prompt_top_logprobs.push_back(lp_list_from(v));
    e.cached_prompt_tokens = j.value("cached", 0);
    e.stored_prompt_tokens = j.value("stored", 0);
    if (j.contains("finish")) {
      int f = j["finish"].get<int>();
      if (f < 0 || f > static_cast<int>(FinishReason::kError))
        throw Error(ErrorCode::kFormat, "ipc event: bad finish");
      e.finish = static_cast<FinishReason>(f);
    }
    e.error = j.value("error", std::string());
    return e;
  });
}

namespace {

json encode_tier(const KvTierStatus &t) {
  return json{{"capacity", t.capacity_bytes}, {"used", t.used_bytes},      {"blocks", t.blocks},
              {"hits", t.hit_blocks},         {"stored", t.stored_blocks}, {"errors", t.errors},
              {"pending", t.pending}};
}

KvTierStatus decode_tier(const json &j) {
  KvTierStatus t;
  t.capacity_bytes = j.at("capacity").get<std::int64_t>();
  t.used_bytes = j.at("used").get<std::int64_t>();
  t.blocks = j.at("blocks").get<std::int64_t>();
  t.hit_blocks = j.at("hits").get<std::int64_t>();
  t.stored_blocks = j.at("stored").get<std::int64_t>();
  t.errors = j.at("errors").get<std::int64_t>();
  t.pending = j.at("pending").get<std::int64_t>();
  return t;
}

}  // namespace

std::string encode_status(const EngineStatus &s) {
  json j{{"running", s.running},
         {"waiting", s.waiting},
         {"preempted", s.preempted},
         {"loading_cache", s.loading_cache},
         {"kv_total", s.kv_blocks_total},
         {"kv_used", s.kv_blocks_used},
         {"kv_cached", s.kv_blocks_cached},
         {"prefix_hit_tokens", s.prefix_hit_tokens},
         {"prompt_tokens", s.prompt_tokens},
         {"prefill_tokens", s.prefill_tokens},
         {"decode_tokens", s.decode_tokens},
         {"steps", s.steps},
         {"last_step_s", s.last_step_seconds},
         {"step_in_progress_s", s.step_in_progress_seconds},
         {"heartbeat_age_s", s.heartbeat_age_seconds},
         {"host_tier", encode_tier(s.host_tier)},
         {"ssd_tier", encode_tier(s.ssd_tier)},
         {"restored_tokens", s.restored_tokens}};
  if (!s.spec_method.empty())
    j["spec"] = {{"method", s.spec_method},
                 {"steps", s.spec_steps},
                 {"drafted", s.spec_drafted},
                 {"accepted", s.spec_accepted},
                 {"accepted_at", s.spec_accepted_at},
                 {"paused", s.spec_paused},
                 {"speedup", s.spec_speedup},
                 {"draft_weights_bytes", s.spec_draft_weights_bytes},
                 {"draft_kv_bytes", s.spec_draft_kv_bytes}};
  return j.dump();
}

EngineStatus decode_status(const std::string &payload) {
  const json j = parse(payload, "status");
  return guarded("status", [&] {
    EngineStatus s;
    s.running = j.at("running").get<std::int32_t>();
    s.waiting = j.at("waiting").get<std::int32_t>();
    s.preempted = j.at("preempted").get<std::int32_t>();
    s.loading_cache = j.at("loading_cache").get<std::int32_t>();
    s.kv_blocks_total = j.at("kv_total").get<std::int64_t>();
    s.kv_blocks_used = j.at("kv_used").get<std::int64_t>();
    s.kv_blocks_cached = j.at("kv_cached").get<std::int64_t>();
    s.prefix_hit_tokens = j.at("prefix_hit_tokens").get<std::int64_t>();
    s.prompt_tokens = j.at("prompt_tokens").get<std::int64_t>();
    s.prefill_tokens = j.at("prefill_tokens").get<std::int64_t>();
    s.decode_tokens = j.at("decode_tokens").get<std::int64_t>();
    s.steps = j.at("steps").get<std::uint64_t>();
    s.last_step_seconds = j.at("last_step_s").get<double>();
    s.step_in_progress_seconds = j.at("step_in_progress_s").get<double>();
    s.heartbeat_age_seconds = j.at("heartbeat_age_s").get<double>();
    s.host_tier = decode_tier(j.at("host_tier"));
    s.ssd_tier = decode_tier(j.at("ssd_tier"));
    s.restored_tokens = j.at("restored_tokens").get<std::int64_t>();
    if (j.contains("spec")) {
      const json &p = j.at("spec");
      s.spec_method = p.at("method").get<std::string>();
      s.spec_steps = p.at("steps").get<std::int64_t>();
      s.spec_drafted = p.at("drafted").get<std::int64_t>();
      s.spec_accepted = p.at("accepted").get<std::int64_t>();
      s.spec_accepted_at = p.at("accepted_at").get<std::vector<std::int64_t>>();
      s.spec_paused = p.value("paused", false);
      s.spec_speedup = p.value("speedup", 0.0);
      s.spec_draft_weights_bytes = p.value("draft_weights_bytes", std::int64_t{0});
      s.spec_draft_kv_bytes = p.value("draft_kv_bytes", std::int64_t{0});
    }
    return s;
  });
}

std::string encode_progress(const LoadProgress &p) {
  return json{{"phase", p.phase}, {"done", p.done}, {"total", p.total}, {"unit", p.unit}}.dump();
}

LoadProgress decode_progress(const std::string &payload) {
  const json j = parse(payload, "progress");
  return guarded("progress", [&] {
    LoadProgress p;
    p.phase = j.at("phase").get<std::string>();
    p.done = j.at("done").get<std::int64_t>();
    p.total = j.at("total").get<std::int64_t>();
    p.unit = j.at("unit").get<std::string>();
    if (p.phase.empty() || p.done < 0 || p.total < 0)
      throw Error(ErrorCode::kFormat, "ipc progress: empty phase or a negative count");
    return p;
  });
}

namespace {

json fault_json(const FaultSpec &f) {
  json j{{"kind", fault_kind_name(f.kind)}, {"count", f.count}};
  j["seconds"] = f.seconds ? json(*f.seconds) : json(nullptr);
  return j;
}

FaultSpec fault_from(const json &j) {
  FaultSpec f;
  const auto kind = parse_fault_kind(j.at("kind").get<std::string>());
  if (!kind) throw Error(ErrorCode::kFormat, "ipc fault: unknown kind");
  f.kind = *kind;
  f.count = j.at("count").get<std::int32_t>();
  if (j.contains("seconds") && !j["seconds"].is_null()) f.seconds = j["seconds"].get<double>();
  return f;
}

}  // namespace

std::string encode_fault(const FaultSpec &spec) { return fault_json(spec).dump(); }

FaultSpec decode_fault(const std::string &payload) {
  const json j = parse(payload, "fault");
  return guarded("fault", [&] { return fault_from(j); });
}

std::string encode_faults(const std::vector<FaultSpec> &specs) {
  json a = json::array();
  for (const auto &f : specs) a.push_back(fault_json(f));
  return a.dump();
}

std::vector<FaultSpec> decode_faults(const std::string &payload) {
  const json j = parse(payload, "faults");
  return guarded("faults", [&] {
    std::vector<FaultSpec> v;
    for (const auto &e : j) v.push_back(fault_from(e));
    return v;
  });
}

}  // namespace keel::ipc
