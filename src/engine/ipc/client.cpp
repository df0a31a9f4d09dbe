#include "engine/ipc/client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace keel::ipc {

namespace {

std::string name_engine(const std::string &model) {
  return model.empty() ? std::string("engine") : "engine for model '" + model + "'";
}

}  // namespace

IpcEngineClient::IpcEngineClient(int fd, IpcClientOptions options)
    : fd_(fd),
      who_(name_engine(options.model)),
      on_progress_(std::move(options.on_progress)),
      writer_(fd, options.limits,
              {[this](FrameType type, std::uint64_t tag, bool partly) {
                 on_expired(type, tag, partly);
               },
               [this](const std::string &why) {
                 fail_all(who_ + " exited or closed its socket (" + why + ")");
               }}),
      last_heard_(std::chrono::steady_clock::now()) {
  reader_ = std::thread([this] { reader_loop(); });
}

IpcEngineClient::~IpcEngineClient() {
  fail_all("engine client closed");
  writer_.close();
  ::shutdown(fd_, SHUT_RDWR);  // wakes the reader
  if (reader_.joinable()) reader_.join();
  ::close(fd_);
}

void IpcEngineClient::submit(GenerationRequest request, EventSink sink) {
  const std::uint64_t id = request.id.value;
  {
    std::lock_guard lock(mu_);
    if (dead_) throw Error(ErrorCode::kUnavailable, who_ + ": " + dead_reason_);
  }
  // Refuse at once while the child is known not to read: the supervisor's kill follows.
  if (auto stall = writer_.stall(); !stall.empty())
    throw Error(ErrorCode::kUnavailable, who_ + " stalled: " + stall);
  std::string payload = encode_submit(request);
  {
    std::lock_guard lock(mu_);
    sinks_[id] = std::move(sink);
  }
  const PostResult posted = writer_.post(FrameType::kSubmit, payload, id, FramePriority::kBulk);
  if (posted == PostResult::kQueued) return;
  {
    std::lock_guard lock(mu_);
    sinks_.erase(id);
  }
  if (posted == PostResult::kClosed)
    throw Error(ErrorCode::kUnavailable, who_ + ": the engine process closed its socket");
  const auto st = writer_.stats();
  char buf[160];
  std::snprintf(buf, sizeof buf, " (%zu requests, %.1f MiB waiting to be written)", st.frames,
                static_cast<double>(st.bytes) / (1024.0 * 1024.0));
  throw Error(ErrorCode::kUnavailable,
              who_ + " is not reading its requests fast enough: its IPC queue is full" + buf);
}

void IpcEngineClient::end_request(RequestId id, FrameType type) {
  {
    std::lock_guard lock(mu_);
    if (dead_ || !sinks_.count(id.value) || abandoned_.count(id.value)) return;
    abandoned_.insert(id.value);
  }
  // A control frame: it has its own allowance, so it is refused only when the child has
  // stopped reading altogether (then the supervisor's kill ends the request).
  writer_.post(type, encode_abort(id), id.value, FramePriority::kControl);
}

void IpcEngineClient::abort(RequestId id) { end_request(id, FrameType::kAbort); }

void IpcEngineClient::stop_request(RequestId id) { end_request(id, FrameType::kStop); }

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

void IpcEngineClient::post_control(FrameType type, const std::string &payload, const char *what) {
  {
    std::lock_guard lock(mu_);
    if (dead_) throw Error(ErrorCode::kUnavailable, who_ + ": " + dead_reason_);
  }
  const PostResult posted = writer_.post(type, payload, 0, FramePriority::kControl);
  if (posted == PostResult::kClosed)
    throw Error(ErrorCode::kUnavailable, who_ + ": the engine process closed its socket");
  if (posted == PostResult::kFull)
    throw Error(ErrorCode::kUnavailable,
                who_ + " is not reading its socket: its IPC queue is full, " + what + " refused");
}

void IpcEngineClient::clear_cache() { post_control(FrameType::kClearCache, "", "cache clear"); }

void IpcEngineClient::inject_fault(const FaultSpec &spec) {
  post_control(FrameType::kInjectFault, encode_fault(spec), "fault");
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

std::optional<IpcEngineClient::Progress> IpcEngineClient::load_progress() const {
  std::lock_guard lock(mu_);
  return progress_;
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

void IpcEngineClient::request_shutdown() {
  writer_.post(FrameType::kShutdown, "", 0, FramePriority::kControl);
}

std::string IpcEngineClient::write_stall() const { return writer_.stall(); }

void IpcEngineClient::fail_one(std::uint64_t id, const std::string &why) {
  RequestEvent e;
  e.id = RequestId(id);
  e.finish = FinishReason::kError;
  e.error = why;
  deliver(e);
}

void IpcEngineClient::on_expired(FrameType type, std::uint64_t tag, bool sent_partly) {
  if (type != FrameType::kSubmit) return;  // aborts and stops stay queued; the stall shows
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f s",
                static_cast<double>(writer_.limits().frame_deadline.count()) / 1000.0);
  fail_one(tag, who_ + " stalled: it did not read this request within its deadline of " + buf);
  // Part of it is in the socket: should the child wake, it must not run it for no one.
  if (sent_partly)
    writer_.post(FrameType::kAbort, encode_abort(RequestId(tag)), tag, FramePriority::kControl);
}

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
        case FrameType::kProgress: {
          LoadProgress p = decode_progress(frame->payload);
          {
            std::lock_guard lock(mu_);
            if (ready_) break;  // late: the load is over
            if (!progress_ || progress_->latest.phase != p.phase)
              progress_ = Progress{p, std::chrono::steady_clock::now()};
            else
              progress_->latest = p;
          }
          if (on_progress_) on_progress_(p);
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
