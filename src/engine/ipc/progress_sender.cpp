#include "engine/ipc/progress_sender.h"

#include "engine/ipc/messages.h"

namespace keel::ipc {

ProgressSender::ProgressSender(int fd, std::chrono::milliseconds interval)
    : writer_(fd), interval_(interval), thread_([this] { run(); }) {}

ProgressSender::~ProgressSender() { finish(); }

void ProgressSender::report(const LoadProgress &progress) {
  {
    std::lock_guard lk(mu_);
    if (stop_ || broken_) return;
    if (progress.phase != latest_.phase) {
      new_phase_ = true;
      if (dirty_) phase_ends_.push_back(latest_);
    }
    latest_ = progress;
    dirty_ = true;
  }
  cv_.notify_all();
}

void ProgressSender::finish() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::uint64_t ProgressSender::frames_sent() const {
  std::lock_guard lk(mu_);
  return sent_;
}

void ProgressSender::run() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_sent{};
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return dirty_ || stop_; });
    if (!dirty_) return;  // stopping with nothing unsent
    // Within a phase, wait out the interval (a new phase or finish() cuts it short); the
    // report sent is the latest when the wait ends.
    if (!new_phase_ && !stop_)
      cv_.wait_until(lk, last_sent + interval_, [&] { return stop_ || new_phase_; });
    std::vector<std::string> ended;
    for (const LoadProgress &p : phase_ends_) ended.push_back(encode_progress(p));
    const std::string payload = encode_progress(latest_);
    phase_ends_.clear();
    dirty_ = new_phase_ = false;
    lk.unlock();
    bool ok = true;
    for (const std::string &e : ended) {
      ok = ok && writer_.write(FrameType::kProgress, e);
      if (!ok) break;
      std::lock_guard g(mu_);
      ++sent_;
    }
    ok = ok && writer_.write(FrameType::kProgress, payload);
    lk.lock();
    last_sent = Clock::now();
    if (!ok) {
      broken_ = true;  // the loader carries on; the front's absence shows at the hello
      return;
    }
    ++sent_;
  }
}

}  // namespace keel::ipc
