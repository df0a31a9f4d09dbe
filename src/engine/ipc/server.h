// The engine child's side of the IPC: serves one EngineApi over a connected Unix socket.
// The reader (the calling thread) turns submit/abort/stop/shutdown frames into engine
// calls; an IpcWriter sends hello, events and status, so the engine thread never blocks
// on the socket; a heartbeat thread sends the engine's status at a fixed interval.
// Status comes from EngineApi::status(), which must not wait for the engine thread, so
// a wedged step still reports itself (step_in_progress_seconds grows) until the front
// kills us.
//
// The outgoing queue is bounded (ipc_writer.h). Token events are bulk frames: when the
// queue is full, that request is aborted in the engine and its finish goes out as
// kError naming why (a front that lost tokens must not show a clean end). Finishes are
// control frames. Heartbeats are dropped when full (the next one is fresher). A front
// that reads nothing for a frame's deadline, or closes the socket, ends serve(); every
// wait on the way out (in-flight aborts, the writer's flush, the joins) has a deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "engine/engine_api.h"
#include "engine/ipc/frame.h"
#include "engine/ipc/messages.h"
#include "engine/ipc/writer.h"

namespace keel::ipc {

// The engine side's queue: a front reads its events continuously, so a queue this full
// or a frame this late means the front is gone or wedged.
inline WriterLimits engine_writer_limits() {
  WriterLimits l;
  l.max_bytes = std::size_t{64} << 20;
  l.max_frames = 65536;
  l.frame_deadline = std::chrono::seconds(30);
  return l;
}

class IpcEngineServer {
 public:
  IpcEngineServer(int fd, std::chrono::milliseconds heartbeat_interval,
                  WriterLimits limits = engine_writer_limits());
  ~IpcEngineServer();

  // Tells the front the model failed to load (then the child exits).
  void send_load_error(const std::string &message);
  // Says hello and serves `engine` until the front closes the socket, asks to shut down
  // or stops reading; then aborts what is still in flight and returns within about
  // 2 x kEndGrace. Returns 0 on an orderly end.
  int serve(EngineApi &engine, const ReadyInfo &info);
  // Whether informational lines (front gone, fault armed) go to stderr; errors always do.
  void set_log_info(bool on) { log_info_.store(on); }

  static constexpr std::chrono::milliseconds kEndGrace{2000};

 private:
  void heartbeat_loop(EngineApi &engine);
  void send_event(EngineApi &engine, const RequestEvent &e);
  // Makes serve() return: the reader is woken by a shutdown of the socket.
  void end_serving(const std::string &why, int rc);

  int fd_;
  std::chrono::milliseconds heartbeat_interval_;
  WriterLimits limits_;
  FrameReader reader_;
  std::unique_ptr<IpcWriter> writer_;  // while serving

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int end_rc_ = 0;
  bool ending_ = false;  // end_serving() ran
  std::unordered_set<std::uint64_t> in_flight_;
  std::unordered_set<std::uint64_t> overflowed_;  // aborted because the queue was full
  std::string last_faults_ = "[]";                // the armed list last sent
  std::atomic<bool> log_info_{true};
};

}  // namespace keel::ipc
