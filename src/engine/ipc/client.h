// The front's side of the IPC: an EngineApi whose engine lives in a child process.
// Same semantics as the in-process engine: events arrive on the sink from the client's
// reader thread, exactly one finish per request. When the child dies or the supervisor
// gives up on it (fail_all), every request in flight gets finish(kError) at once with
// the reason, so no caller waits on a dead engine.
//
// No call here waits for the child (issue 24): frames to it go through an IpcWriter
// (bounded queue, deadline per frame). A full queue makes submit() throw
// Error(kUnavailable) naming the engine; a submit the child has not read by its
// deadline fails that request (finish kError); both show in write_stall(), which the
// supervisor counts as a stall (it kills and restarts the engine).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/engine_api.h"
#include "engine/ipc/frame.h"
#include "engine/ipc/messages.h"
#include "engine/ipc/writer.h"

namespace keel::ipc {

struct IpcClientOptions {
  std::string model;  // names the engine in errors ("engine for model 'x'")
  WriterLimits limits;
  // Told each load progress frame, on the client's reader thread (the registry logs
  // them); must not block.
  LoadProgressSink on_progress;
};

class IpcEngineClient : public EngineApi {
 public:
  // Takes ownership of `fd` (a connected socket to the child) and starts reading.
  explicit IpcEngineClient(int fd, IpcClientOptions options = {});
  ~IpcEngineClient() override;
  IpcEngineClient(const IpcEngineClient &) = delete;
  IpcEngineClient &operator=(const IpcEngineClient &) = delete;

  // Throws Error(kUnavailable) when the engine is dead (nothing is queued then).
  void submit(GenerationRequest request, EventSink sink) override;
  void abort(RequestId id) override;
  // Ends the request inside the engine with kStop (the front matched a stop string).
  void stop_request(RequestId id) override;
  // The last status the child reported, its request counts capped by what the front
  // still waits on: a request the front has ended (a stop string matched, the client
  // left) is never shown, even before the child's next report says it is gone.
  EngineStatus status() const override;
  void clear_cache() override;
  // Arms in the child; the list mirrors the child's reports (and this call, at once).
  void inject_fault(const FaultSpec &spec) override;
  std::vector<FaultSpec> armed_faults() const override;

  // Waits for the child's hello. Throws Error(kUnavailable) naming the cause when the
  // child reported a load error or died, and Error(kTimeout) past the deadline.
  ReadyInfo wait_ready(std::chrono::steady_clock::time_point deadline);
  // The hello, if it has arrived; never waits.
  std::optional<ReadyInfo> ready_info() const;
  // The child's latest load progress and when its phase began (the front's clock);
  // nullopt before its first report. Kept after the hello (frames after it are ignored):
  // the registry stops showing it once the model is ready.
  struct Progress {
    LoadProgress latest;
    std::chrono::steady_clock::time_point phase_since;
  };
  std::optional<Progress> load_progress() const;
  // Seconds since the last frame of any kind arrived (a heartbeat at least).
  double seconds_since_heard() const;
  bool dead() const;
  std::string dead_reason() const;
  std::size_t in_flight() const;
  // Ends every request in flight with finish(kError, reason) and refuses new ones.
  void fail_all(const std::string &reason);
  // Asks the child to stop (it aborts what is left and exits).
  void request_shutdown();
  // Why the child counts as stalled on its socket (ipc_writer.h), or empty.
  std::string write_stall() const;
  IpcWriter::Stats write_stats() const { return writer_.stats(); }
  // "engine for model 'x'" (or "engine" unnamed): how errors name it.
  const std::string &who() const { return who_; }

 private:
  void reader_loop();
  void deliver(const RequestEvent &event);
  void fail_one(std::uint64_t id, const std::string &why);
  void on_expired(FrameType type, std::uint64_t tag, bool sent_partly);
  // An abort or stop frame for a live request the front gives up on.
  void end_request(RequestId id, FrameType type);
  void post_control(FrameType type, const std::string &payload, const char *what);

  int fd_;
  std::string who_;
  LoadProgressSink on_progress_;
  IpcWriter writer_;
  std::thread reader_;

  mutable std::mutex mu_;
  std::condition_variable ready_cv_;
  std::optional<ReadyInfo> ready_;
  std::optional<Progress> progress_;
  std::string load_error_;
  bool dead_ = false;
  std::string dead_reason_;
  EngineStatus status_;
  std::chrono::steady_clock::time_point last_heard_;
  std::unordered_map<std::uint64_t, EventSink> sinks_;
  std::unordered_set<std::uint64_t> abandoned_;  // in sinks_, aborted by the front
  std::vector<FaultSpec> armed_;
  std::mutex deliver_mu_;  // orders deliveries so a request never gets two finishes
};

}  // namespace keel::ipc
