#include "loadgen/results.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "loadgen/report_html.h"
#include "loadgen/spec_counters.h"
#include "loadgen/svg_chart.h"

namespace keel::loadgen {
namespace {

RequestRecord rec(double start, double ttft, double end, int prompt, int out, int cached) {
  RequestRecord r;
  r.start_s = start;
  r.ttft_s = ttft;
  r.end_s = end;
  r.prompt_tokens = prompt;
  r.output_tokens = out;
  r.cached_tokens = cached;
  r.ok = true;
  return r;
}

LevelRun sample_run() {
  LevelRun run;
  run.records.push_back(rec(0.0, 0.1, 1.1, 100, 11, 0));   // ITL (1.1-0.1)/10 = 0.1
  run.records.push_back(rec(0.5, 0.2, 2.2, 100, 21, 50));  // ITL (1.7-0.2)/20 = 0.075
  RequestRecord failed;
  failed.error = "HTTP 500: boom <script>";
  run.records.push_back(failed);
  run.duration_s = 2.0;
  return run;
}

TEST(Results, LevelFiguresComeFromUsage) {
  const LevelSummary s = summarize_level(sample_run(), 4, 0);
  EXPECT_EQ(s.requests, 3);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.prompt_tokens, 200);
  EXPECT_EQ(s.output_tokens, 32);
  EXPECT_DOUBLE_EQ(s.cached_share, 0.25);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.output_token_throughput, 16.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 116.0);
  EXPECT_NEAR(s.ttft_ms.p50, 150, 1e-9);
  EXPECT_NEAR(s.itl_ms.min, 75, 1e-9);
  EXPECT_NEAR(s.itl_ms.max, 100, 1e-9);
  EXPECT_NEAR(s.e2e_ms.max, 1700, 1e-9);
  ASSERT_EQ(s.errors.size(), 1u);
  EXPECT_EQ(s.errors[0].second, 1);
}

TEST(Results, InterTokenLatencyNeedsTwoTokens) {
  EXPECT_LT(inter_token_latency_s(rec(0, 0.1, 0.2, 5, 1, 0)), 0);
  EXPECT_LT(inter_token_latency_s(rec(0, -1, 0.2, 5, 5, 0)), 0);
  EXPECT_NEAR(inter_token_latency_s(rec(1, 0.5, 2.5, 5, 5, 0)), 0.25, 1e-12);  // (2.5-1-0.5)/4
}

TEST(Results, CsvHasAHeaderAndARowPerLevel) {
  BenchResults r;
  r.runs = {sample_run(), sample_run()};
  r.levels = {summarize_level(r.runs[0], 1, 0), summarize_level(r.runs[1], 8, 0)};
  std::istringstream csv(results_csv(r));
  std::vector<std::string> lines;
  for (std::string l; std::getline(csv, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);
  const auto commas = [](const std::string &l) { return std::count(l.begin(), l.end(), ','); };
  EXPECT_EQ(commas(lines[1]), commas(lines[0]));
  EXPECT_EQ(lines[2].rfind("8,0,3,2,1,", 0), 0u) << lines[2];
  const auto j = results_json(r);
  EXPECT_EQ(j["levels"][1]["concurrency"], 8);
  EXPECT_EQ(j["levels"][1]["requests_detail"].size(), 3u);
}

TEST(Report, SelfContainedAndEscaped) {
  BenchResults r;
  r.config = {
      {"server", "127.0.0.1:1"}, {"model", "<img src=x onerror=alert(1)>"}, {"workload", "random"}};
  r.runs = {sample_run()};
  r.levels = {summarize_level(r.runs[0], 2, 0)};
  const std::string html = report_html(r);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("&lt;img src=x"), std::string::npos);
  EXPECT_FALSE(std::regex_search(html, std::regex("https?://")));
  EXPECT_GE(std::count(html.begin(), html.end(), '\n'), 1);
  std::size_t svgs = 0;
  for (std::size_t at = 0; (at = html.find("<svg", at)) != std::string::npos; ++at) ++svgs;
  EXPECT_EQ(svgs, 6u);
  EXPECT_NE(html.find("Cached prompt tokens"), std::string::npos);
}

TEST(Report, ChartPlotsEveryPoint) {
  Chart c{"t", "x", "y", {}, {{"a", {{0, 0}, {1, 5}, {2, 10}}}}, false};
  const std::string svg = svg_chart(c);
  std::size_t circles = 0;
  for (std::size_t at = 0; (at = svg.find("<circle", at)) != std::string::npos; ++at) ++circles;
  EXPECT_EQ(circles, 3u);
  EXPECT_EQ(html_escape("a<b>&\"'"), "a&lt;b&gt;&amp;&#34;&#39;");
}

}  // namespace
}  // namespace keel::loadgen

namespace keel::loadgen {
namespace {

TEST(SpecCounters, ParsedFromApiStatusAndDifferenced) {
  const std::string status = R"({"models": [
    {"id": "other", "speculative": null},
    {"id": "m", "running": 0, "speculative": {"method": "ngram", "verify_steps": 10,
      "drafted_tokens": 40, "accepted_tokens": 25, "accepted_per_position": [9, 7, 5, 4]}}]})";
  EXPECT_FALSE(parse_spec_counters(status, "other"));  // no drafter
  EXPECT_FALSE(parse_spec_counters(status, "absent"));
  EXPECT_FALSE(parse_spec_counters("not json", "m"));
  const auto after = parse_spec_counters(status, "m");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->method, "ngram");
  EXPECT_EQ(after->accepted_at, (std::vector<std::int64_t>{9, 7, 5, 4}));
  SpecCounters before;
  before.verify_steps = 4;
  before.drafted = 16;
  before.accepted = 5;
  before.accepted_at = {3, 1, 1, 0};
  const SpecCounters d = *after - before;
  EXPECT_EQ(d.verify_steps, 6);
  EXPECT_EQ(d.drafted, 24);
  EXPECT_EQ(d.accepted, 20);
  EXPECT_EQ(d.accepted_at, (std::vector<std::int64_t>{6, 6, 4, 4}));
  EXPECT_DOUBLE_EQ(d.acceptance_length(), 1.0 + 20.0 / 6.0);
  EXPECT_DOUBLE_EQ(d.acceptance_rate(), 20.0 / 24.0);
  EXPECT_EQ(SpecCounters{}.acceptance_length(), 0.0);

  LevelSummary s = summarize_level(LevelRun{}, 1, 0);
  s.speculative = d;
  BenchResults r;
  r.config = {{"workload", "edit"}};
  r.levels.push_back(s);
  r.runs.emplace_back();
  const auto j = results_json(r);
  EXPECT_EQ(j["levels"][0]["speculative"]["accepted_tokens"], 20);
  EXPECT_EQ(j["levels"][0]["speculative"]["accepted_per_position"][3], 4);
  EXPECT_NE(report_html(r).find("acceptance length 4.33"), std::string::npos);
}

}  // namespace
}  // namespace keel::loadgen
