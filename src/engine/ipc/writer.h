// The one writer of an IPC socket (front -> engine, or engine -> front): a bounded queue
// of frames in front of a non-blocking socket, drained by a thread of its own. Posting
// never waits for the peer: it queues the frame or refuses it at once. Each frame has a
// deadline; a peer that does not read in time is reported (on_expired) and shows as a
// stall (stall()), which the supervisor turns into a verdict.
//
//   any thread ──post()──▶ [frame][frame]... (bounded: bytes and frames) ──writer──▶ socket
//                  │ full: kFull at once                 │ EAGAIN: poll() in slices
//                  ▼                                     ▼ past a frame's deadline
//            caller fails its request               on_expired(frame), stall()
//
// Two priorities: bulk frames (submits, token events, status) are refused once the
// queue holds max_bytes or max_frames; control frames (aborts, stops, finishes,
// shutdown) have a second allowance of the same size on top, so ending work never
// waits behind admitting it. One frame larger than max_bytes still goes into an empty
// queue (a single long prompt is not unservable).
//
// Every wait of the writer thread is a poll() or condition wait of at most kPollSlice,
// so close() joins it within one slice.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/ipc/frame.h"

namespace keel::ipc {

struct WriterLimits {
  std::size_t max_bytes = std::size_t{64} << 20;  // queued bytes (headers included)
  std::size_t max_frames = 4096;
  std::chrono::milliseconds frame_deadline{10'000};  // from post() to its last byte written
};

enum class FramePriority { kBulk, kControl };
enum class PostResult { kQueued, kFull, kClosed };

class IpcWriter {
 public:
  struct Callbacks {
    // A frame passed its deadline before the peer took all of it. A bulk frame not yet
    // begun is dropped; one partly sent (sent_partly) still goes on, so the stream stays
    // whole; control frames are kept. Runs on the writer thread, no lock held.
    std::function<void(FrameType type, std::uint64_t tag, bool sent_partly)> on_expired;
    // The socket failed (the peer closed it): every queued frame is dropped and later
    // posts get kClosed. Runs once, on the writer thread.
    std::function<void(const std::string &why)> on_closed;
  };
  struct Stats {
    std::size_t frames = 0, bytes = 0;  // queued now
    double blocked_seconds = 0.0;       // since the peer last took a byte (0: not blocked)
    std::uint64_t sent = 0, refused = 0, expired = 0;
    bool closed = false;
  };

  // Makes `fd` non-blocking (the caller keeps owning it) and starts the writer thread.
  IpcWriter(int fd, WriterLimits limits, Callbacks callbacks = {});
  ~IpcWriter();
  IpcWriter(const IpcWriter &) = delete;
  IpcWriter &operator=(const IpcWriter &) = delete;

  // Never waits for the peer. `tag` comes back in on_expired (a request id, say).
  PostResult post(FrameType type, const std::string &payload, std::uint64_t tag = 0,
                  FramePriority priority = FramePriority::kBulk);
  // Waits until every queued frame is written, the socket failed, or `deadline`.
  // Returns whether the queue drained.
  bool flush(std::chrono::steady_clock::time_point deadline);
  // Stops the thread within one slice; frames still queued are dropped. Idempotent.
  void close();

  Stats stats() const;
  // Why the peer counts as stalled, or empty: a frame passed its deadline, or the
  // queue refused a frame while the peer had taken nothing for min(1 s, deadline).
  std::string stall() const;
  const WriterLimits &limits() const { return limits_; }

  static constexpr std::chrono::milliseconds kPollSlice{50};

 private:
  using Clock = std::chrono::steady_clock;
  struct Item {
    std::string bytes;  // header + payload
    std::size_t sent = 0;
    FrameType type{};
    std::uint64_t tag = 0;
    FramePriority priority = FramePriority::kBulk;
    Clock::time_point deadline;
    bool expired = false;  // reported
  };

  void run();
  // Reports (and drops, where allowed) the frames past their deadline; unlocks to call back.
  void expire(std::unique_lock<std::mutex> &lock);
  void fail(std::unique_lock<std::mutex> &lock, const std::string &why);
  std::string stall_locked(Clock::time_point now) const;

  int fd_;
  WriterLimits limits_;
  Callbacks callbacks_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;     // the writer waits for frames
  std::condition_variable drained_cv_;  // flush() waits for an empty queue
  std::deque<Item> queue_;
  std::size_t bytes_ = 0;
  bool stop_ = false, closed_ = false;
  std::optional<Clock::time_point> blocked_since_;  // the head is waiting on the peer
  // The peer last took a byte, or was first owed one after an empty queue.
  Clock::time_point last_progress_ = Clock::now();
  std::optional<Clock::time_point> last_refused_;
  std::uint64_t sent_ = 0, refused_ = 0, expired_ = 0;
  std::chrono::milliseconds worst_wait_{0};  // the oldest expired frame's wait
  std::thread thread_;                       // last: started when everything above exists
};

}  // namespace keel::ipc
