#include "engine/ipc_client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "core/error.h"

namespace keel::ipc {

IpcEngineClient::IpcEngineClient(int fd)
    : fd_(fd), writer_(fd), last_heard_(std::chrono::steady_clock::now()) {
  reader_ = std::thread([this] { reader_loop(); });
}

IpcEngineClient::~IpcEngineClient() {
  fail_all("engine client closed");
  ::shutdown(fd_, SHUT_RDWR);  // wakes the reader
  if (reader_.joinable()) reader_.join();
  ::close(fd_);
}

void IpcEngineClient::submit(GenerationRequest request, EventSink sink) {
  const std::uint64_t id = request.id.value;
  {
    std::lock_guard lock(mu_);
    if (dead_) throw Error(ErrorCode::kUnavailable, "engine: " + dead_reason_);
    sinks_[id] = std::move(sink);
  }
  if (!writer_.write(FrameType::kSubmit, encode_submit(request))) {
    {
      std::lock_guard lock(mu_);
      sinks_.erase(id);
    }
    throw Error(ErrorCode::kUnavailable, "engine: the engine process closed its socket");
  }
}

void IpcEngineClient::abort(RequestId id) {
  {
    std::lock_guard lock(mu_);
    if (dead_ || !sinks_.count(id.value)) return;
    abandoned_.insert(id.value);
  }
  writer_.write(FrameType::kAbort, encode_abort(id));
}

EngineStatus IpcEngineClient::status() const {
  std::lock_guard lock(mu_);
  EngineStatus s = status_;
  if (dead_) {
    s.running = s.waiting = s.preempted = s.loading_cache = 0;
    return s;
  }
  // The child's report lags its events by up to a heartbeat; cap it by the requests
  // the front still waits on, taking the excess off running first (an ended request
  // was most likely decoding), then waiting, preempted and loading (four disjoint sets).
  const auto live = static_cast<std::int32_t>(sinks_.size() - abandoned_.size());
  std::int32_t excess = s.running + s.waiting + s.preempted + s.loading_cache - live;
  for (std::int32_t *count : {&s.running, &s.waiting, &s.preempted, &s.loading_cache}) {
    const std::int32_t cut = std::clamp(excess, 0, *count);
    *count -= cut;
    excess -= cut;
  }
  return s;
}

void IpcEngineClient::clear_cache() {
  {
    std::lock_guard lock(mu_);
    if (dead_) throw Error(ErrorCode::kUnavailable, "engine: " + dead_reason_);
  }
  if (!writer_.write(FrameType::kClearCache, ""))
    throw Error(ErrorCode::kUnavailable, "engine: the engine process closed its socket");
}

void IpcEngineClient::inject_fault(const FaultSpec &spec) {
  {
    std::lock_guard lock(mu_);
    if (dead_) throw Error(ErrorCode::kUnavailable, "engine: " + dead_reason_);
  }
  if (!writer_.write(FrameType::kInjectFault, encode_fault(spec)))
    throw Error(ErrorCode::kUnavailable, "engine: the engine process closed its socket");
  std::lock_guard lock(mu_);
  std::erase_if(armed_, [&](const FaultSpec &f) { return f.kind == spec.kind; });
  if (spec.count > 0) armed_.push_back(spec);
}

std::vector<FaultSpec> IpcEngineClient::armed_faults() const {
  std::lock_guard lock(mu_);
  return dead_ ? std::vector<FaultSpec>{} : armed_;
}

ReadyInfo IpcEngineClient::wait_ready(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  if (!ready_cv_.wait_until(lock, deadline, [&] { return ready_ || dead_; }))
    throw Error(ErrorCode::kTimeout, "engine: the model did not load before the deadline");
  if (ready_) return *ready_;
  throw Error(ErrorCode::kUnavailable,
              "engine: " + (load_error_.empty() ? dead_reason_ : load_error_));
}

std::optional<ReadyInfo> IpcEngineClient::ready_info() const {
  std::lock_guard lock(mu_);
  return ready_;
}

double IpcEngineClient::seconds_since_heard() const {
  std::lock_guard lock(mu_);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - last_heard_).count();
}

bool IpcEngineClient::dead() const {
  std::lock_guard lock(mu_);
  return dead_;
}

std::string IpcEngineClient::dead_reason() const {
  std::lock_guard lock(mu_);
  return dead_reason_;
}

std::size_t IpcEngineClient::in_flight() const {
  std::lock_guard lock(mu_);
  return sinks_.size();
}

void IpcEngineClient::request_shutdown() { writer_.write(FrameType::kShutdown, ""); }

void IpcEngineClient::deliver(const RequestEvent &event) {
  std::lock_guard order(deliver_mu_);
  EventSink sink;
  {
    std::lock_guard lock(mu_);
    auto it = sinks_.find(event.id.value);
    if (it == sinks_.end()) return;  // already finished (e.g. failed by the supervisor)
    sink = event.finish ? std::move(it->second) : it->second;
    if (event.finish) {
      sinks_.erase(it);
      abandoned_.erase(event.id.value);
    }
  }
  sink(event);
}

void IpcEngineClient::fail_all(const std::string &reason) {
  std::unordered_map<std::uint64_t, EventSink> sinks;
  {
    std::lock_guard lock(mu_);
    if (!dead_) {
      dead_ = true;
      dead_reason_ = reason;
    }
    ready_cv_.notify_all();
  }
  std::lock_guard order(deliver_mu_);
  {
    std::lock_guard lock(mu_);
    sinks.swap(sinks_);
    abandoned_.clear();
  }
  for (auto &[id, sink] : sinks) {
    RequestEvent e;
    e.id = RequestId(id);
    e.finish = FinishReason::kError;
    e.error = reason;
    sink(e);
  }
}

void IpcEngineClient::reader_loop() {
  FrameReader reader(fd_);
  std::string why = "the engine process exited";
  try {
    while (auto frame = reader.read()) {
      {
        std::lock_guard lock(mu_);
        last_heard_ = std::chrono::steady_clock::now();
      }
      switch (frame->type) {
        case FrameType::kHello: {
          ReadyInfo info = decode_ready(frame->payload);
          std::lock_guard lock(mu_);
          ready_ = std::move(info);
          ready_cv_.notify_all();
          break;
        }
        case FrameType::kLoadError: {
          std::lock_guard lock(mu_);
          load_error_ = frame->payload;
          why = "model load failed: " + frame->payload;
          break;
        }
        case FrameType::kEvent:
          deliver(decode_event(frame->payload));
          break;
        case FrameType::kStatus: {
          EngineStatus s = decode_status(frame->payload);
          std::lock_guard lock(mu_);
          status_ = s;
          break;
        }
        case FrameType::kArmedFaults: {
          auto faults = decode_faults(frame->payload);
          std::lock_guard lock(mu_);
          armed_ = std::move(faults);
          break;
        }
        default:
          throw Error(ErrorCode::kFormat, "ipc: unexpected frame type from the engine");
      }
    }
  } catch (const Error &e) {
    // Most often the child died in the middle of a frame (a crash while writing).
    why = std::string("the engine process exited or broke its connection (") + e.what() + ")";
  }
  fail_all(why);
}

}  // namespace keel::ipc
