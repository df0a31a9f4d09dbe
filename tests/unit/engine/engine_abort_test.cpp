// Aborts at every stage, abort storms, stuck steps, shutdown: the engine always ends
// requests with one finish event and frees their blocks by the next step.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>

#include "collector.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

using namespace std::chrono_literals;

// A gate the toy model's forward can stop at, so a test can act "mid-step".
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool armed = false, reached = false, open = true;
  std::function<bool(const ForwardBatch &)> when;  // stop at the first batch matching this

  void at_forward(const ForwardBatch &b) {
    std::unique_lock lk(mu);
    if (!armed || !when(b)) return;
    armed = false;
    reached = true;
    open = false;
    cv.notify_all();
    cv.wait(lk, [&] { return open; });
  }
  void arm(std::function<bool(const ForwardBatch &)> w) {
    std::lock_guard lk(mu);
    when = std::move(w);
    armed = true;
    reached = false;
  }
  bool wait_reached(std::chrono::milliseconds t = 10s) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, t, [&] { return reached; });
  }
  void release() {
    std::lock_guard lk(mu);
    open = true;
    cv.notify_all();
  }
};

bool idle_and_clean(Engine &e) {
  auto s = e.status();
  const bool clean = s.running == 0 && s.waiting == 0 && s.preempted == 0 && s.loading_cache == 0 &&
                     s.kv_blocks_used == 0;
  if (!clean && std::getenv("KEEL_TEST_VERBOSE"))
    std::fprintf(stderr, "status: running %d waiting %d preempted %d loading %d used %lld\n",
                 s.running, s.waiting, s.preempted, s.loading_cache,
                 static_cast<long long>(s.kv_blocks_used));
  return clean;
}

TEST(EngineAbort, WhileWaiting) {
  // One running at a time, 1 ms a step: request 1 runs for about 200 ms.
  ToyEngine e(64, 4, small_config(64, 1, 16), [](ToyRunner &r) {
    r.on_forward = [](const ForwardBatch &) { std::this_thread::sleep_for(1ms); };
  });
  Collector c;
  e->submit(greedy_request(1, random_prompt(1, 8), 200), c.sink());
  ASSERT_TRUE(c.wait_tokens(1, 1));
  e->submit(greedy_request(2, random_prompt(2, 8), 5), c.sink());
  const auto steps = e->status().steps;
  // Two steps later the submit has surely been taken into the scheduler's queue.
  ASSERT_TRUE(eventually([&] { return e->status().steps >= steps + 2; }));
  EXPECT_EQ(e->status().waiting, 1);
  e->abort(RequestId{2});
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(2).finish, FinishReason::kAbort);
  EXPECT_TRUE(c.get(2).tokens.empty());
  EXPECT_EQ(c.get(1).finish, std::nullopt);  // the other goes on
  e->abort(RequestId{1});
  ASSERT_TRUE(c.wait_finished(2));
  ASSERT_TRUE(eventually([&] { return idle_and_clean(*e); }));
}

TEST(EngineAbort, MidPrefillChunk) {
  Gate gate;
  ToyEngine e(64, 4, small_config(64, 8, 8), [&](ToyRunner &r) {
    r.on_forward = [&](const ForwardBatch &b) { gate.at_forward(b); };
  });
  Collector c;
  // Stop inside the second prefill chunk of a 40-token prompt.
  gate.arm([](const ForwardBatch &b) { return !b.seqs.empty() && b.seqs[0].start_pos == 8; });
  e->submit(greedy_request(1, random_prompt(3, 40), 5), c.sink());
  ASSERT_TRUE(gate.wait_reached());
  auto s = e->status();
  EXPECT_EQ(s.running, 1);
  EXPECT_GT(s.kv_blocks_used, 0);
  EXPECT_GT(s.step_in_progress_seconds, 0.0);  // readable while the step runs
  e->abort(RequestId{1});                      // acknowledged at once, mid-step
  gate.release();
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).finish, FinishReason::kAbort);
  EXPECT_TRUE(c.get(1).tokens.empty());
  ASSERT_TRUE(eventually([&] { return idle_and_clean(*e); }));
  // Nothing half-computed was cached: a new request with the same prompt is correct.
  e->submit(greedy_request(2, random_prompt(3, 40), 5), c.sink());
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.get(2).tokens, toy_greedy(random_prompt(3, 40), 5, kToyVocab));
}

TEST(EngineAbort, MidDecodeFreesByTheNextStep) {
  Gate gate;
  ToyEngine e(64, 4, small_config(), [&](ToyRunner &r) {
    r.on_forward = [&](const ForwardBatch &b) { gate.at_forward(b); };
  });
  Collector c;
  // Stop at the decode step that computes position 9 (the 4th output token's input).
  gate.arm([](const ForwardBatch &b) { return b.total_tokens() == 1 && b.seqs[0].start_pos == 9; });
  e->submit(greedy_request(1, random_prompt(4, 6), 1000), c.sink());
  ASSERT_TRUE(gate.wait_reached());
  e->abort(RequestId{1});
  const auto steps_at_abort = e->status().steps;
  gate.release();
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).finish, FinishReason::kAbort);
  EXPECT_EQ(c.get(1).finishes, 1);
  ASSERT_TRUE(eventually([&] { return idle_and_clean(*e); }));
  // Freed at the start of the next step: only the step in flight completed.
  EXPECT_LE(e->status().steps, steps_at_abort + 1);
  const auto tokens = c.get(1).tokens;
  auto ref = toy_greedy(random_prompt(4, 6), static_cast<int>(tokens.size()), kToyVocab);
  EXPECT_EQ(tokens, ref);
}

TEST(EngineAbort, AbortOfUnknownOrFinishedIsIgnored) {
  ToyEngine e(64, 4, small_config());
  Collector c;
  e->abort(RequestId{77});
  e->submit(greedy_request(1, random_prompt(5, 5), 3), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  e->abort(RequestId{1});
  e->stop_request(RequestId{1});
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(c.get(1).finishes, 1);
  EXPECT_EQ(c.get(1).finish, FinishReason::kLength);
}

TEST(EngineAbort, StopRequestFinishesWithStop) {
  Gate gate;
  ToyEngine e(64, 4, small_config(), [&](ToyRunner &r) {
    r.on_forward = [&](const ForwardBatch &b) { gate.at_forward(b); };
  });
  Collector c;
  gate.arm([](const ForwardBatch &b) { return b.seqs[0].start_pos == 7; });
  e->submit(greedy_request(1, random_prompt(6, 5), 100000), c.sink());
  ASSERT_TRUE(gate.wait_reached());
  e->stop_request(RequestId{1});  // the front saw a stop string
  gate.release();
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).finish, FinishReason::kStop);
  EXPECT_EQ(c.get(1).tokens.size(), 4u);  // the step in flight still delivers its token
  ASSERT_TRUE(eventually([&] { return idle_and_clean(*e); }));
}

TEST(EngineAbort, DeadlineEndsARequest) {
  ToyEngine e(64, 4, small_config(), [](ToyRunner &r) {
    r.on_forward = [](const ForwardBatch &) { std::this_thread::sleep_for(1ms); };
  });
  Collector c;
  auto req = greedy_request(1, random_prompt(6, 5), 100000);
  req.deadline = std::chrono::steady_clock::now() + 50ms;
  e->submit(req, c.sink());
  ASSERT_TRUE(c.wait_finished(1, 10s));
  EXPECT_EQ(c.get(1).finish, FinishReason::kError);
  EXPECT_NE(c.get(1).error.find("deadline"), std::string::npos);
  ASSERT_TRUE(eventually([&] { return idle_and_clean(*e); }));
}

// Thousands of requests, random aborts from two other threads at random moments.
TEST(EngineAbort, StormLeavesTheEngineIdleAndClean) {
  ToyEngine e(96, 4, small_config(64, 32, 16));
  Collector c;
  const int n = 3000;
  std::atomic<int> submitted{0};
  std::thread submitter([&] {
    for (int i = 1; i <= n; ++i) {
      e->submit(greedy_request(i, random_prompt(i, 1 + i % 37), 1 + i % 23), c.sink());
      submitted.store(i);
      if (i % 50 == 0) std::this_thread::sleep_for(100us);
    }
  });
  std::vector<std::thread> aborters;
  for (int a = 0; a < 2; ++a)
    aborters.emplace_back([&, a] {
      std::mt19937 rng(a + 1);
      while (submitted.load() < n) {
        const int hi = std::max(1, submitted.load());
        e->abort(RequestId{1 + rng() % hi});
        if (rng() % 4 == 0) e->abort(RequestId{static_cast<std::uint64_t>(hi)});  // just submitted
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 50));
      }
    });
  submitter.join();
  for (auto &t : aborters) t.join();
  ASSERT_TRUE(c.wait_finished(n, 120s)) << c.finished() << " of " << n;
  int aborted = 0, completed = 0;
  for (const auto &[id, r] : c.all()) {
    ASSERT_EQ(r.finishes, 1) << id;
    ASSERT_EQ(r.events_after_finish, 0) << id;
    if (r.finish == FinishReason::kAbort) ++aborted;
    if (r.finish == FinishReason::kLength) {
      ++completed;
      ASSERT_EQ(r.tokens, toy_greedy(random_prompt(id, 1 + id % 37), 1 + id % 23, kToyVocab)) << id;
    }
  }
  EXPECT_EQ(aborted + completed, n);
  EXPECT_GT(aborted, 0);
  EXPECT_GT(completed, 0);
  ASSERT_TRUE(eventually([&] { return idle_and_clean(*e); }));
  EXPECT_EQ(e.runner->poisoned_rows.load(), 0);
  // And it still serves.
  e->submit(greedy_request(n + 1, random_prompt(1, 9), 4), c.sink());
  ASSERT_TRUE(c.wait_finished(n + 1));
  EXPECT_EQ(c.get(n + 1).tokens, toy_greedy(random_prompt(1, 9), 4, kToyVocab));
}

TEST(EngineAbort, StuckStepIsVisibleAndStopIsBounded) {
  Gate gate;
  auto e = std::make_unique<ToyEngine>(64, 4, small_config(), [&](ToyRunner &r) {
    r.on_forward = [&](const ForwardBatch &b) { gate.at_forward(b); };
  });
  Collector c;
  gate.arm([](const ForwardBatch &) { return true; });
  (*e)->submit(greedy_request(1, random_prompt(7, 5), 10), c.sink());
  ASSERT_TRUE(gate.wait_reached());
  std::this_thread::sleep_for(30ms);
  // Status, abort and submit return at once although the step never ends.
  const auto t0 = std::chrono::steady_clock::now();
  auto s = (*e)->status();
  (*e)->abort(RequestId{1});
  (*e)->submit(greedy_request(2, random_prompt(8, 5), 10), c.sink());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 50ms);
  EXPECT_GE(s.step_in_progress_seconds, 0.025);
  EXPECT_GE(s.heartbeat_age_seconds, 0.025);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ((*e)->status().waiting, 1);  // the queued submit is counted
  // A stop with a short deadline reports the wedge instead of hanging.
  EXPECT_FALSE((*e)->stop(std::chrono::steady_clock::now() + 50ms));
  gate.release();
  EXPECT_TRUE((*e)->stop(std::chrono::steady_clock::now() + 5s));
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.get(1).finish, FinishReason::kAbort);
  EXPECT_EQ(c.get(2).finish, FinishReason::kAbort);
  EXPECT_THROW((*e)->submit(greedy_request(3, {1}, 1), c.sink()), Error);
}

TEST(EngineAbort, StopAbortsEverythingAndJoins) {
  ToyEngine e(32, 4, small_config(64, 4, 16), [](ToyRunner &r) {
    r.on_forward = [](const ForwardBatch &) { std::this_thread::sleep_for(1ms); };
  });
  Collector c;
  for (int i = 1; i <= 20; ++i)
    e->submit(greedy_request(i, random_prompt(i, 10), 100000), c.sink());
  ASSERT_TRUE(c.wait_tokens(1, 1));
  EXPECT_TRUE(e->stop(std::chrono::steady_clock::now() + 5s));
  EXPECT_EQ(c.finished(), 20u);
  for (const auto &[id, r] : c.all()) {
    EXPECT_EQ(r.finishes, 1);
    EXPECT_EQ(r.finish, FinishReason::kAbort);
  }
  EXPECT_TRUE(e->stop(std::chrono::steady_clock::now()));  // idempotent
}

}  // namespace
}  // namespace keel::test
