// The engine child's side of load progress (issue 22): the loader reports as often as it
// likes (a report is a store under a mutex, never a wait on the socket), and one thread
// sends the latest report to the front as a progress frame, at most one every
// `interval` within a phase (a new phase goes at once), so a tight loop neither floods
// the socket nor slows the load. finish() sends what is still unsent and stops the
// thread; it must run before anything else writes to the socket (the hello or the load
// error), so that frames never interleave.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/ipc/frame.h"
#include "engine/load_progress.h"

namespace keel::ipc {

class ProgressSender {
 public:
  explicit ProgressSender(int fd,
                          std::chrono::milliseconds interval = std::chrono::milliseconds(200));
  ~ProgressSender();  // finish()
  ProgressSender(const ProgressSender &) = delete;
  ProgressSender &operator=(const ProgressSender &) = delete;

  void report(const LoadProgress &progress);
  LoadProgressSink sink() {
    return [this](const LoadProgress &p) { report(p); };
  }
  void finish();
  std::uint64_t frames_sent() const;

 private:
  void run();

  FrameWriter writer_;
  std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  LoadProgress latest_;
  // The last report of each phase that ended before it was sent, oldest first: they go
  // first, so the front sees every phase's final figure (its 100%), even when several
  // phases end within one send.
  std::vector<LoadProgress> phase_ends_;
  bool dirty_ = false;      // latest_ not sent yet
  bool new_phase_ = false;  // latest_ starts a phase
  bool stop_ = false;
  bool broken_ = false;  // a write failed: the front is gone, stop sending
  std::uint64_t sent_ = 0;
  std::thread thread_;  // last: started when everything above exists
};

}  // namespace keel::ipc
