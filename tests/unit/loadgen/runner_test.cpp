// run_level against a scripted local server: figures come from usage however the server
// batches its events, a silent server ends at the deadline, refusals are counted.
// clang-format off
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp needs std::exchange
// clang-format on
#include "loadgen/runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <csignal>
#include <functional>
#include <thread>

#include "scripted_server.h"

namespace keel::loadgen {
namespace {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;
using testing::ScriptedServer;

std::string sse_response(const std::string &events) {
  return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + events;
}

Workload tiny_workload(int n) {
  WorkloadOptions o;
  o.kind = WorkloadKind::kFixed;
  o.num_prompts = n;
  o.input_len = 4;
  o.output_len = 8;
  return make_workload(o);
}

RunOptions options(const std::string &url, std::chrono::milliseconds budget, int concurrency) {
  RunOptions r;
  r.endpoint = parse_base_url(url);
  r.model = "m";
  r.concurrency = concurrency;
  r.deadline = std::chrono::steady_clock::now() + budget;
  return r;
}

TEST(Runner, TokensComeFromUsageWhateverTheEventBatching) {
  // All eight tokens' text in one event: a per-event count would say 1.
  ScriptedServer server([](const std::string &req) {
    EXPECT_NE(req.find("POST /v1/completions"), std::string::npos);
    EXPECT_NE(req.find("\"include_usage\":true"), std::string::npos);
    return sse_response(
        "data: {\"choices\":[{\"index\":0,\"text\":\"abcdefgh\"}]}\n\n"
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":8,"
        "\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\ndata: [DONE]\n\n");
  });
  int progress_calls = 0;
  RunOptions o = options(server.url(), 10s, 2);
  o.on_progress = [&](int done, int failed) {
    ++progress_calls;
    EXPECT_EQ(failed, 0);
  };
  const LevelRun run = run_level(tiny_workload(5), o);
  ASSERT_EQ(run.records.size(), 5u);
  EXPECT_EQ(progress_calls, 5);
  EXPECT_EQ(server.requests(), 5);  // a closed connection is reopened, nothing retried
  for (const auto &r : run.records) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_tokens, 8);
    EXPECT_EQ(r.prompt_tokens, 4);
    EXPECT_EQ(r.cached_tokens, 2);
    EXPECT_EQ(r.content_events, 1);
    EXPECT_GE(r.ttft_s, 0);
    EXPECT_LE(r.start_s + r.ttft_s, r.end_s);
  }
  EXPECT_GT(run.duration_s, 0);
}

TEST(Runner, ASilentServerEndsAtTheDeadline) {
  ScriptedServer server([](const std::string &) { return std::string(); });
  const auto t0 = std::chrono::steady_clock::now();
  const LevelRun run = run_level(tiny_workload(6), options(server.url(), 300ms, 2));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  ASSERT_EQ(run.records.size(), 6u);  // the two in flight and the four never sent
  int timed_out = 0, unsent = 0;
  for (const auto &r : run.records) {
    EXPECT_FALSE(r.ok);
    timed_out += r.error.find("timed out") != std::string::npos;
    unsent += r.error == "not finished before --timeout";
  }
  EXPECT_EQ(timed_out, 2);
  EXPECT_EQ(unsent, 4);
}

TEST(Runner, SigintEndsALevelAtOnce) {
  ScriptedServer server([](const std::string &) { return std::string(); });
  const auto t0 = std::chrono::steady_clock::now();
  // Well after run_level has its signal handler; the deadline is far away.
  std::thread interrupter([] {
    std::this_thread::sleep_for(400ms);
    std::raise(SIGINT);
  });
  const LevelRun run = run_level(tiny_workload(5), options(server.url(), 60s, 2));
  interrupter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_TRUE(run.interrupted);
  ASSERT_EQ(run.records.size(), 5u);
  int interrupted = 0;
  for (const auto &r : run.records) {
    EXPECT_FALSE(r.ok);
    interrupted += r.error.find("interrupted") != std::string::npos;
  }
  EXPECT_EQ(interrupted, 5) << run.records[0].error;
}

TEST(Runner, RefusalsAndStreamsWithoutUsageFail) {
  std::atomic<int> n{0};
  ScriptedServer server([&](const std::string &) {
    if (n++ % 2 == 0) {
      const std::string body = R"({"error":{"message":"engine is restarting"}})";
      return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
             "application/json\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    }
    return sse_response("data: {\"choices\":[{\"index\":0,\"text\":\"x\"}]}\n\ndata: [DONE]\n\n");
  });
  const LevelRun run = run_level(tiny_workload(4), options(server.url(), 10s, 1));
  ASSERT_EQ(run.records.size(), 4u);
  int refused = 0, no_usage = 0;
  for (const auto &r : run.records) {
    EXPECT_FALSE(r.ok);
    refused += r.error == "HTTP 503: engine is restarting";
    no_usage += r.error.find("no usage") != std::string::npos;
  }
  EXPECT_EQ(refused, 2);
  EXPECT_EQ(no_usage, 2);
}

TEST(Runner, NothingListeningFailsEveryRequestQuickly) {
  std::string url;
  {
    ScriptedServer gone([](const std::string &) { return std::string(); });
    url = gone.url();
  }
  const auto t0 = std::chrono::steady_clock::now();
  const LevelRun run = run_level(tiny_workload(3), options(url, 10s, 1));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  ASSERT_EQ(run.records.size(), 3u);
  for (const auto &r : run.records) {
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("connect"), std::string::npos) << r.error;
  }
}

}  // namespace
}  // namespace keel::loadgen
