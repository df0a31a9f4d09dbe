// MaskPrefetcher: a step's masks come back in their posted order whoever computed them
// (the worker, the engine thread or its pool), a mask that never finishes is a timeout
// rather than a hang, and an abandoned step leaves its constraints alive until done.
#include "engine/mask_prefetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "core/error.h"
#include "core/thread_pool.h"

namespace keel::test {
namespace {

using namespace std::chrono_literals;

// Allows token `id` only; a dead end when id < 0. Blocks in compute_mask while *gate.
class IdConstraint final : public OutputConstraint {
 public:
  IdConstraint(TokenId id, std::shared_ptr<std::atomic<bool>> gate = nullptr)
      : id_(id), gate_(std::move(gate)), words_(4, 0) {}
  bool compute_mask(std::span<const TokenId>) override {
    started.store(true);
    while (gate_ && gate_->load()) std::this_thread::sleep_for(1ms);
    std::fill(words_.begin(), words_.end(), id_ < 0 ? ~0u : 0u);
    if (id_ < 0) return false;
    words_[id_ >> 5] |= 1u << (id_ & 31);
    return true;
  }
  std::span<const std::uint32_t> mask_words() const override { return words_; }
  bool accept(TokenId) override { return true; }
  std::atomic<bool> started{false};

 private:
  TokenId id_;
  std::shared_ptr<std::atomic<bool>> gate_;
  std::vector<std::uint32_t> words_;
};

TEST(MaskPrefetcher, ResultsInPostedOrderOnAnyThread) {
  ThreadPool pool(3);
  MaskPrefetcher p;
  for (int step = 0; step < 50; ++step) {
    std::vector<MaskPrefetcher::Job> jobs;
    std::vector<std::shared_ptr<OutputConstraint>> cs;
    for (int i = 0; i < 9; ++i) {
      cs.push_back(std::make_shared<IdConstraint>(i == 4 ? -1 : (step + i) % 100));
      jobs.push_back({cs.back(), {}});
    }
    p.start(std::move(jobs));
    const auto &done = p.finish(step % 2 ? &pool : nullptr, std::chrono::steady_clock::now() + 10s);
    ASSERT_EQ(done.size(), 9u);
    for (int i = 0; i < 9; ++i) {
      EXPECT_EQ(done[i].allowed, i != 4);
      const TokenId want = (step + i) % 100;
      if (i != 4) EXPECT_EQ((cs[i]->mask_words()[want >> 5] >> (want & 31)) & 1u, 1u);
    }
  }
}

// compute_mask throws: the job carries the exception's text (not a silent all-false
// mask that reads as a dead end), on the worker, the engine thread or the pool alike.
class ThrowingConstraint final : public OutputConstraint {
 public:
  bool compute_mask(std::span<const TokenId>) override {
    throw Error(ErrorCode::kInternal, "grammar: token table missing for state 7");
  }
  std::span<const std::uint32_t> mask_words() const override { return words_; }
  bool accept(TokenId) override { return true; }

 private:
  std::vector<std::uint32_t> words_ = std::vector<std::uint32_t>(4, 0);
};

TEST(MaskPrefetcher, AThrowingMaskCarriesItsTextAndIsNoDeadEnd) {
  ThreadPool pool(2);
  MaskPrefetcher p;
  for (int step = 0; step < 20; ++step) {
    std::vector<MaskPrefetcher::Job> jobs;
    for (int i = 0; i < 5; ++i) {
      std::shared_ptr<OutputConstraint> c;
      if (i == 1)
        c = std::make_shared<ThrowingConstraint>();
      else
        c = std::make_shared<IdConstraint>(i == 3 ? -1 : i);
      jobs.push_back({c, {}});
    }
    p.start(std::move(jobs));
    const auto &done = p.finish(step % 2 ? &pool : nullptr, std::chrono::steady_clock::now() + 10s);
    ASSERT_EQ(done.size(), 5u);
    EXPECT_FALSE(done[1].allowed);
    EXPECT_EQ(done[1].error, "grammar: token table missing for state 7");
    EXPECT_FALSE(done[3].allowed);  // a true dead end has no error text
    EXPECT_TRUE(done[3].error.empty());
    for (int i : {0, 2, 4}) {
      EXPECT_TRUE(done[i].allowed);
      EXPECT_TRUE(done[i].error.empty()) << done[i].error;
    }
  }
}

TEST(MaskPrefetcher, AMaskPastTheDeadlineIsATimeoutAndAbandonIsSafe) {
  auto gate = std::make_shared<std::atomic<bool>>(true);
  MaskPrefetcher p;
  {
    auto c = std::make_shared<IdConstraint>(3, gate);
    p.start({{c, {}}});
    // The worker has taken it (finish would otherwise compute it on this thread).
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!c->started.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(c->started.load());
  }  // the job alone owns the constraint now
  try {
    p.finish(nullptr, std::chrono::steady_clock::now() + 50ms);
    FAIL() << "no timeout";
  } catch (const Error &e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  }
  p.abandon();
  gate->store(false);  // the job in flight ends; the next step works as usual
  auto c2 = std::make_shared<IdConstraint>(5);
  p.start({{c2, {}}});
  EXPECT_TRUE(p.finish(nullptr, std::chrono::steady_clock::now() + 10s).at(0).allowed);
}

}  // namespace
}  // namespace keel::test
