#include "loadgen/results.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"

namespace keel::loadgen {

using ojson = nlohmann::ordered_json;

double inter_token_latency_s(const RequestRecord &r) {
  if (r.ttft_s < 0 || r.output_tokens < 2) return -1;
  return (r.end_s - r.start_s - r.ttft_s) / (r.output_tokens - 1);
}

LevelSummary summarize_level(const LevelRun &run, int concurrency, double request_rate) {
  LevelSummary s;
  s.concurrency = concurrency;
  s.request_rate = request_rate;
  s.requests = static_cast<int>(run.records.size());
  s.duration_s = run.duration_s;
  std::vector<double> ttft, itl, e2e;
  std::map<std::string, int> errors;
  for (const RequestRecord &r : run.records) {
    if (!r.ok) {
      ++s.failed;
      ++errors[r.error];
      continue;
    }
    ++s.completed;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    s.cached_tokens += r.cached_tokens;
    if (r.ttft_s >= 0) ttft.push_back(r.ttft_s * 1e3);
    if (const double i = inter_token_latency_s(r); i >= 0) itl.push_back(i * 1e3);
    e2e.push_back((r.end_s - r.start_s) * 1e3);
  }
  if (s.duration_s > 0) {
    s.request_throughput = s.completed / s.duration_s;
    s.output_token_throughput = static_cast<double>(s.output_tokens) / s.duration_s;
    s.total_token_throughput =
        static_cast<double>(s.prompt_tokens + s.output_tokens) / s.duration_s;
  }
  if (s.prompt_tokens > 0)
    s.cached_share = static_cast<double>(s.cached_tokens) / static_cast<double>(s.prompt_tokens);
  s.ttft_ms = summarize(ttft);
  s.itl_ms = summarize(itl);
  s.e2e_ms = summarize(e2e);
  s.errors.assign(errors.begin(), errors.end());
  std::stable_sort(s.errors.begin(), s.errors.end(),
                   [](const auto &a, const auto &b) { return a.second > b.second; });
  return s;
}

namespace {

ojson summary_json(const Summary &s) {
  return {{"count", s.count}, {"mean", s.mean}, {"min", s.min}, {"p50", s.p50},
          {"p90", s.p90},     {"p99", s.p99},   {"max", s.max}};
}

ojson level_json(const LevelSummary &s, const LevelRun &run) {
  ojson j;
  j["concurrency"] = s.concurrency;
  j["request_rate"] = s.request_rate;
  j["requests"] = s.requests;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["duration_s"] = s.duration_s;
  j["prompt_tokens"] = s.prompt_tokens;
  j["output_tokens"] = s.output_tokens;
  j["cached_tokens"] = s.cached_tokens;
  j["cached_share"] = s.cached_share;
  j["request_throughput"] = s.request_throughput;
  j["output_token_throughput"] = s.output_token_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["ttft_ms"] = summary_json(s.ttft_ms);
  j["itl_ms"] = summary_json(s.itl_ms);
  j["e2e_ms"] = summary_json(s.e2e_ms);
  ojson errors = ojson::array();
  for (const auto &[msg, n] : s.errors) errors.push_back({{"message", msg}, {"count", n}});
  j["errors"] = std::move(errors);
  if (s.speculative) {
    const SpecCounters &c = *s.speculative;
    j["speculative"] = {{"method", c.method},
                        {"verify_steps", c.verify_steps},
                        {"drafted_tokens", c.drafted},
                        {"accepted_tokens", c.accepted},
                        {"acceptance_rate", c.acceptance_rate()},
                        {"acceptance_length", c.acceptance_length()},
                        {"accepted_per_position", c.accepted_at}};
  }
  ojson reqs = ojson::array();
  for (const RequestRecord &r : run.records) {
    ojson x = {{"session", r.session},
               {"turn", r.turn},
               {"ok", r.ok},
               {"start_s", r.start_s},
               {"ttft_s", r.ttft_s},
               {"end_s", r.end_s},
               {"prompt_tokens", r.prompt_tokens},
               {"output_tokens", r.output_tokens},
               {"cached_tokens", r.cached_tokens},
               {"content_events", r.content_events}};
    if (!r.ok) x["error"] = r.error;
    reqs.push_back(std::move(x));
  }
  j["requests_detail"] = std::move(reqs);
  return j;
}

}  // namespace

ojson results_json(const BenchResults &results) {
  ojson j;
  j["config"] = results.config;
  ojson levels = ojson::array();
  for (std::size_t i = 0; i < results.levels.size(); ++i)
    levels.push_back(level_json(results.levels[i], results.runs.at(i)));
  j["levels"] = std::move(levels);
  return j;
}

std::string results_csv(const BenchResults &results) {
  std::ostringstream out;
  out << "concurrency,request_rate,requests,completed,failed,duration_s,prompt_tokens,"
         "output_tokens,cached_tokens,cached_share,request_throughput,output_token_throughput,"
         "total_token_throughput";
  for (const char *m : {"ttft_ms", "itl_ms", "e2e_ms"})
    for (const char *p : {"mean", "p50", "p90", "p99"}) out << ',' << m << '_' << p;
  out << '\n';
  for (const LevelSummary &s : results.levels) {
    out << s.concurrency << ',' << s.request_rate << ',' << s.requests << ',' << s.completed << ','
        << s.failed << ',' << s.duration_s << ',' << s.prompt_tokens << ',' << s.output_tokens
        << ',' << s.cached_tokens << ',' << s.cached_share << ',' << s.request_throughput << ','
        << s.output_token_throughput << ',' << s.total_token_throughput;
    for (const Summary *m : {&s.ttft_ms, &s.itl_ms, &s.e2e_ms})
      out << ',' << m->mean << ',' << m->p50 << ',' << m->p90 << ',' << m->p99;
    out << '\n';
  }
  return out.str();
}

void write_file(const std::filesystem::path &path, const std::string &text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error(ErrorCode::kInvalidArgument, "cannot write " + tmp.string());
    f << text;
    if (!f.flush())
      throw Error(ErrorCode::kResourceExhausted, "writing " + tmp.string() + " failed");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    throw Error(ErrorCode::kInvalidArgument, "rename to " + path.string() + ": " + ec.message());
}

}  // namespace keel::loadgen
