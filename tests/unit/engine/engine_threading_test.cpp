// One thread per engine owns the runner; two engines live side by side; a failing
// forward fails only its step's requests.
#include <gtest/gtest.h>

#include "collector.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

TEST(EngineThreading, OnlyTheEngineThreadCallsTheRunner) {
  ToyEngine e(64, 4, small_config());
  Collector c;
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t)
    clients.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i)
        e->submit(greedy_request(t * 100 + i + 1, random_prompt(t * 100 + i, 7), 5), c.sink());
    });
  for (auto &t : clients) t.join();
  ASSERT_TRUE(c.wait_finished(40));
  std::lock_guard lk(e.runner->mu);
  EXPECT_EQ(e.runner->threads.size(), 1u);
  EXPECT_EQ(e.runner->threads.count(std::this_thread::get_id()), 0u);
}

TEST(EngineThreading, TwoEnginesInOneProcess) {
  ToyEngine a(64, 4, small_config());
  ToyEngine b(32, 8, small_config(32, 4, 8, false));
  Collector ca, cb;
  for (int i = 1; i <= 8; ++i) {
    a->submit(greedy_request(i, random_prompt(i, 12), 9), ca.sink());
    b->submit(greedy_request(i, random_prompt(i, 12), 9), cb.sink());  // same ids: independent
  }
  ASSERT_TRUE(ca.wait_finished(8));
  ASSERT_TRUE(cb.wait_finished(8));
  for (int i = 1; i <= 8; ++i) {
    const auto ref = toy_greedy(random_prompt(i, 12), 9, kToyVocab);
    EXPECT_EQ(ca.get(i).tokens, ref);
    EXPECT_EQ(cb.get(i).tokens, ref);
  }
  std::set<std::thread::id> ta, tb;
  {
    std::lock_guard l1(a.runner->mu);
    ta = a.runner->threads;
  }
  {
    std::lock_guard l2(b.runner->mu);
    tb = b.runner->threads;
  }
  ASSERT_EQ(ta.size(), 1u);
  ASSERT_EQ(tb.size(), 1u);
  EXPECT_NE(*ta.begin(), *tb.begin());
}

TEST(EngineThreading, FailingForwardFailsItsStepAndTheEngineGoesOn) {
  std::atomic<bool> failed{false};
  ToyEngine e(64, 4, small_config(), [&](ToyRunner &r) {
    r.on_forward = [&](const ForwardBatch &b) {
      // Fail once, in the decode step at position 8.
      if (b.seqs[0].start_pos == 8 && !failed.exchange(true))
        throw Error(ErrorCode::kInternal, "injected device fault");
    };
  });
  Collector c;
  e->submit(greedy_request(1, random_prompt(1, 6), 100000), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).tokens.size(), 3u);  // positions 6 and 7 decoded, 8 failed
  EXPECT_EQ(c.get(1).finish, FinishReason::kError);
  EXPECT_NE(c.get(1).error.find("injected device fault"), std::string::npos);
  ASSERT_TRUE(eventually([&] { return e->status().kv_blocks_used == 0; }));
  e->submit(greedy_request(2, random_prompt(1, 6), 7), c.sink());
  ASSERT_TRUE(c.wait_finished(2));
  EXPECT_EQ(c.get(2).tokens, toy_greedy(random_prompt(1, 6), 7, kToyVocab));
  EXPECT_EQ(e.runner->poisoned_rows.load(), 0);
}

TEST(EngineThreading, MissingLogitsFailTheRequestInsteadOfLeavingAPhantom) {
  ToyEngine e(64, 4, small_config(), [](ToyRunner &r) { r.drop_rows = true; });
  Collector c;
  e->submit(greedy_request(1, random_prompt(1, 6), 5), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(1).finish, FinishReason::kError);
  EXPECT_NE(c.get(1).error.find("no logits"), std::string::npos);
  ASSERT_TRUE(eventually([&] {
    auto s = e->status();
    return s.running == 0 && s.kv_blocks_used == 0;
  }));
}

TEST(EngineThreading, BackendErrorsSurfaceFromTheConstructor) {
  EXPECT_THROW(
      Engine([]() -> EngineBackend { throw Error(ErrorCode::kNotFound, "model: missing"); }),
      Error);
  EXPECT_THROW(Engine([] { return EngineBackend{}; }), Error);
}

TEST(EngineThreading, ThrowingSinkDoesNotStopTheEngine) {
  ToyEngine e(64, 4, small_config());
  Collector c;
  e->submit(greedy_request(1, random_prompt(1, 6), 5),
            [](const RequestEvent &) { throw std::runtime_error("client gone"); });
  e->submit(greedy_request(2, random_prompt(2, 6), 5), c.sink());
  ASSERT_TRUE(c.wait_finished(1));
  EXPECT_EQ(c.get(2).tokens.size(), 5u);
  ASSERT_TRUE(eventually([&] { return e->status().kv_blocks_used == 0; }));
}

}  // namespace
}  // namespace keel::test
