// Fair admission through the engine (issue 31): a request's group (GenerationRequest::group)
// reaches the scheduler, so single requests submitted while a 64-sequence group holds
// every seat finish long before that group does, with the same greedy output as alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <vector>

#include "collector.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "toy_runner.h"

namespace keel::test {
namespace {

TEST(EngineFairness, SingleRequestsAreNotHeldBehindABigGroup) {
  constexpr int kBig = 64, kTokens = 12;
  ToyEngine e(1024, 4, small_config(64, /*seqs=*/4, 16));
  std::mutex mu;
  std::vector<std::uint64_t> order;  // finish order
  Collector c;
  bool singles_sent = false;  // engine thread only
  std::function<void(const RequestEvent &)> sink;
  sink = [&, inner = c.sink()](const RequestEvent &ev) {
    if (ev.finish) {
      std::lock_guard lk(mu);
      order.push_back(ev.id.value);
    }
    // The big group's first token: it holds all four seats. The singles arrive now (from
    // the engine thread, so at a known point, whatever the machine's speed).
    if (!singles_sent && ev.id.value == 1) {
      singles_sent = true;
      for (int i = 1001; i <= 1002; ++i) e->submit(greedy_request(i, random_prompt(i, 5), 4), sink);
    }
    inner(ev);
  };
  for (int i = 1; i <= kBig; ++i) {
    auto r = greedy_request(i, random_prompt(i, 5), kTokens);
    r.group = 1;
    e->submit(r, sink);
  }
  ASSERT_TRUE(c.wait_finished(kBig + 2, std::chrono::seconds(120)));
  for (int i = 1001; i <= 1002; ++i)
    EXPECT_EQ(c.get(i).tokens, toy_greedy(random_prompt(i, 5), 4, kToyVocab)) << i;
  for (int i = 1; i <= kBig; ++i)  // the sequences swapped out resumed and are exact
    EXPECT_EQ(c.get(i).tokens, toy_greedy(random_prompt(i, 5), kTokens, kToyVocab)) << i;
  // First come first served would have finished at least 60 of the group first.
  std::lock_guard lk(mu);
  for (std::uint64_t single : {1001u, 1002u}) {
    const auto at = std::find(order.begin(), order.end(), single) - order.begin();
    EXPECT_LT(at, kBig / 2) << "single request " << single << " finished after " << at << " others";
  }
  EXPECT_EQ(e.runner->poisoned_rows.load(), 0);
}

}  // namespace
}  // namespace keel::test
