#include "loadgen/report_html.h"

#include <algorithm>
#include <cstdio>

#include "loadgen/svg_chart.h"

namespace keel::loadgen {

namespace {

std::string fmt(double v, const char *spec = "%.2f") {
  char buf[48];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

std::vector<std::string> level_labels(const BenchResults &r) {
  std::vector<std::string> out;
  for (const auto &l : r.levels) out.push_back(level_label(l));
  return out;
}

ChartSeries per_level(const BenchResults &r, const std::string &name,
                      double (*value)(const LevelSummary &)) {
  ChartSeries s{name, {}};
  for (std::size_t i = 0; i < r.levels.size(); ++i)
    s.points.emplace_back(static_cast<double>(i), value(r.levels[i]));
  return s;
}

std::string latency_chart(const BenchResults &r, const char *title, Summary LevelSummary::*m) {
  Chart c{title, "load level", "milliseconds", level_labels(r), {}, false};
  for (auto [name, p] : {std::pair{"p50", &Summary::p50}, std::pair{"p90", &Summary::p90},
                         std::pair{"p99", &Summary::p99}}) {
    ChartSeries s{name, {}};
    for (std::size_t i = 0; i < r.levels.size(); ++i)
      s.points.emplace_back(static_cast<double>(i), r.levels[i].*m.*p);
    c.series.push_back(std::move(s));
  }
  return svg_chart(c);
}

// The running share of prompt tokens served from the cache, by finish time.
std::string cache_chart(const BenchResults &r) {
  Chart c{"Cached prompt tokens over time (cumulative share)",
          "seconds since the level started",
          "cached share",
          {},
          {},
          true};
  for (std::size_t i = 0; i < r.levels.size(); ++i) {
    std::vector<const RequestRecord *> done;
    for (const auto &rec : r.runs[i].records)
      if (rec.ok) done.push_back(&rec);
    std::sort(done.begin(), done.end(),
              [](const RequestRecord *a, const RequestRecord *b) { return a->end_s < b->end_s; });
    ChartSeries s{level_label(r.levels[i]), {}};
    long long cached = 0, prompt = 0;
    for (const RequestRecord *rec : done) {
      cached += rec->cached_tokens;
      prompt += rec->prompt_tokens;
      s.points.emplace_back(rec->end_s, prompt > 0 ? static_cast<double>(cached) / prompt : 0.0);
    }
    c.series.push_back(std::move(s));
  }
  return svg_chart(c);
}

std::string summary_table(const BenchResults &r) {
  std::string o =
      "<table><tr><th>level</th><th>completed</th><th>failed</th><th>duration s</th>"
      "<th>req/s</th><th>output tok/s</th><th>total tok/s</th><th>cached</th>"
      "<th>TTFT p50 / p90 / p99 ms</th><th>ITL p50 / p90 / p99 ms</th>"
      "<th>E2E p50 / p90 / p99 ms</th></tr>";
  auto pct = [](const Summary &s) {
    return fmt(s.p50, "%.1f") + " / " + fmt(s.p90, "%.1f") + " / " + fmt(s.p99, "%.1f");
  };
  for (const auto &l : r.levels) {
    o += "<tr><td>" + html_escape(level_label(l)) + "</td><td>" + std::to_string(l.completed) +
         "/" + std::to_string(l.requests) + "</td><td>" + std::to_string(l.failed) + "</td><td>" +
         fmt(l.duration_s) + "</td><td>" + fmt(l.request_throughput) + "</td><td>" +
         fmt(l.output_token_throughput, "%.1f") + "</td><td>" +
         fmt(l.total_token_throughput, "%.1f") + "</td><td>" + fmt(l.cached_share * 100, "%.1f%%") +
         "</td><td>" + pct(l.ttft_ms) + "</td><td>" + pct(l.itl_ms) + "</td><td>" + pct(l.e2e_ms) +
         "</td></tr>";
  }
  return o + "</table>";
}

// Each level's speculative decoding, where the server reported it.
std::string speculative_list(const BenchResults &r) {
  std::string o;
  for (const auto &l : r.levels) {
    if (!l.speculative) continue;
    const SpecCounters &c = *l.speculative;
    std::string at;
    for (const std::int64_t n : c.accepted_at) at += (at.empty() ? "" : ", ") + std::to_string(n);
    o += "<li>" + html_escape(level_label(l)) + ": " + html_escape(c.method) +
         ", acceptance length " + fmt(c.acceptance_length()) + " (" + std::to_string(c.accepted) +
         " of " + std::to_string(c.drafted) + " drafts accepted in " +
         std::to_string(c.verify_steps) + " verify steps; by position: " + at + ")</li>";
  }
  return o.empty() ? "" : "<h2>Speculative decoding</h2><ul>" + o + "</ul>";
}

std::string errors_list(const BenchResults &r) {
  std::string o;
  for (const auto &l : r.levels)
    for (const auto &[msg, n] : l.errors)
      o += "<li>" + html_escape(level_label(l)) + ": " + std::to_string(n) + " &times; " +
           html_escape(msg) + "</li>";
  return o.empty() ? "<p>None.</p>" : "<ul>" + o + "</ul>";
}

constexpr const char *kStyle =
    "body{font:14px system-ui,sans-serif;margin:24px;color:#222}"
    "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 8px;"
    "text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}"
    ".charts{display:flex;flex-wrap:wrap;gap:12px}.chart{border:1px solid #ddd;background:#fff}"
    ".chart text{font-size:11px;fill:#333}.chart .title{font-size:13px;font-weight:600}"
    ".grid{stroke:#eee}.frame{fill:none;stroke:#999}pre{background:#f6f6f6;padding:8px;"
    "white-space:pre-wrap}";

}  // namespace

std::string level_label(const LevelSummary &level) {
  if (level.request_rate > 0) return "r=" + fmt(level.request_rate, "%g") + "/s";
  return "c=" + std::to_string(level.concurrency);
}

std::string report_html(const BenchResults &r) {
  std::string o = "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>keel bench: " +
                  html_escape(r.config.value("model", "")) + "</title><style>" + kStyle +
                  "</style></head><body>";
  o += "<h1>keel bench</h1><p>Model <b>" + html_escape(r.config.value("model", "")) + "</b> at " +
       html_escape(r.config.value("server", "")) + ", workload <b>" +
       html_escape(r.config.value("workload", "")) + "</b>.</p>";
  o += summary_table(r);
  o += "<div class=\"charts\">";
  Chart tok{"Token throughput", "load level", "tokens per second", level_labels(r), {}, false};
  tok.series.push_back(
      per_level(r, "output", [](const LevelSummary &l) { return l.output_token_throughput; }));
  tok.series.push_back(
      per_level(r, "total", [](const LevelSummary &l) { return l.total_token_throughput; }));
  o += svg_chart(tok);
  Chart req{"Request throughput", "load level", "requests per second", level_labels(r), {}, false};
  req.series.push_back(
      per_level(r, "requests", [](const LevelSummary &l) { return l.request_throughput; }));
  o += svg_chart(req);
  o += latency_chart(r, "Time to first token", &LevelSummary::ttft_ms);
  o += latency_chart(r, "Inter-token latency", &LevelSummary::itl_ms);
  o += latency_chart(r, "End-to-end latency", &LevelSummary::e2e_ms);
  o += cache_chart(r);
  o += "</div>" + speculative_list(r) + "<h2>Errors</h2>" + errors_list(r);
  o += "<h2>Configuration</h2><pre>" + html_escape(r.config.dump(2)) + "</pre></body></html>\n";
  return o;
}

}  // namespace keel::loadgen
