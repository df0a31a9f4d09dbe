// Gathers engine events per request, checking the event contract as they arrive:
// nothing after a finish, exactly one finish.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine_api.h"

namespace keel::test {

struct Collected {
  std::vector<TokenId> tokens;
  std::vector<TokenLogprob> sampled_logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  std::optional<FinishReason> finish;
  std::string error;
  int events = 0, finishes = 0, events_after_finish = 0;
  std::int32_t cached_prompt_tokens = -1;  // from the first event
};

class Collector {
 public:
  EventSink sink() {
    return [this](const RequestEvent &ev) {
      std::lock_guard lk(mu_);
      Collected &c = results_[ev.id.value];
      if (c.finish) ++c.events_after_finish;
      if (c.events++ == 0) {
        c.cached_prompt_tokens = ev.cached_prompt_tokens;
        c.prompt_logprobs = ev.prompt_logprobs;
      } else if (!ev.prompt_logprobs.empty()) {
        ++c.events_after_finish;  // prompt logprobs only with the first event
      }
      c.tokens.insert(c.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      c.sampled_logprobs.insert(c.sampled_logprobs.end(), ev.sampled_logprobs.begin(),
                                ev.sampled_logprobs.end());
      c.top_logprobs.insert(c.top_logprobs.end(), ev.top_logprobs.begin(), ev.top_logprobs.end());
      if (ev.finish) {
        c.finish = ev.finish;
        c.error = ev.error;
        ++c.finishes;
        ++finished_;
      }
      cv_.notify_all();
    };
  }

  // Waits until `n` requests have finished; false on timeout.
  bool wait_finished(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return finished_ >= n; });
  }
  bool wait_tokens(std::uint64_t id, std::size_t n,
                   std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] {
      auto it = results_.find(id);
      return it != results_.end() && (it->second.tokens.size() >= n || it->second.finish);
    });
  }
  Collected get(std::uint64_t id) {
    std::lock_guard lk(mu_);
    return results_[id];
  }
  std::size_t finished() {
    std::lock_guard lk(mu_);
    return finished_;
  }
  std::unordered_map<std::uint64_t, Collected> all() {
    std::lock_guard lk(mu_);
    return results_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::uint64_t, Collected> results_;
  std::size_t finished_ = 0;
};

// Polls `pred` until it holds or the timeout passes.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

}  // namespace keel::test
