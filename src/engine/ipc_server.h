// The engine child's side of the IPC: serves one EngineApi over a connected Unix socket.
// The reader (the calling thread) turns submit/abort/shutdown frames into engine calls;
// a writer thread sends events, so the engine thread never blocks on the socket; a
// heartbeat thread sends the engine's status at a fixed interval. Status comes from
// EngineApi::status(), which must not wait for the engine thread, so a wedged step
// still reports itself (step_in_progress_seconds grows) until the front kills us.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_set>

#include "engine/engine_api.h"
#include "engine/ipc_frame.h"
#include "engine/ipc_messages.h"

namespace keel::ipc {

class IpcEngineServer {
 public:
  IpcEngineServer(int fd, std::chrono::milliseconds heartbeat_interval);
  ~IpcEngineServer();

  // Tells the front the model failed to load (then the child exits).
  void send_load_error(const std::string &message);
  // Says hello and serves `engine` until the front closes the socket or asks to shut
  // down; then aborts what is still in flight and returns. Returns 0 on an orderly end.
  int serve(EngineApi &engine, const ReadyInfo &info);
  // Whether informational lines (front gone, fault armed) go to stderr; errors always do.
  void set_log_info(bool on) { log_info_.store(on); }

 private:
  void enqueue(FrameType type, std::string payload);
  void writer_loop();
  void heartbeat_loop(EngineApi &engine);

  int fd_;
  std::chrono::milliseconds heartbeat_interval_;
  FrameWriter writer_;
  FrameReader reader_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<FrameType, std::string>> queue_;
  bool stopping_ = false;
  std::unordered_set<std::uint64_t> in_flight_;
  std::string last_faults_ = "[]";  // the armed list last sent
  std::atomic<bool> log_info_{true};
};

}  // namespace keel::ipc
