#include "engine/ipc/server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "core/error.h"

namespace keel::ipc {

IpcEngineServer::IpcEngineServer(int fd, std::chrono::milliseconds heartbeat_interval,
                                 WriterLimits limits)
    : fd_(fd), heartbeat_interval_(heartbeat_interval), limits_(limits), reader_(fd) {}

IpcEngineServer::~IpcEngineServer() = default;

void IpcEngineServer::send_load_error(const std::string &message) {
  FrameWriter(fd_, limits_.frame_deadline).write(FrameType::kLoadError, message);
}

void IpcEngineServer::end_serving(const std::string &why, int rc) {
  {
    std::lock_guard lock(mu_);
    if (rc > end_rc_) end_rc_ = rc;
    if (ending_) return;
    ending_ = true;
  }
  if (rc != 0 || log_info_.load()) std::fprintf(stderr, "keel engine: %s\n", why.c_str());
  ::shutdown(fd_, SHUT_RDWR);
}

void IpcEngineServer::heartbeat_loop(EngineApi &engine) {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    // A full queue drops this beat: the front is behind, and the next one is fresher.
    writer_->post(FrameType::kStatus, encode_status(engine.status()));
    // Faults are taken by the engine as they strike: report the list when it changed.
    std::string faults = encode_faults(engine.armed_faults());
    lock.lock();
    if (faults != last_faults_) {
      last_faults_ = faults;
      lock.unlock();
      writer_->post(FrameType::kArmedFaults, faults, 0, FramePriority::kControl);
      lock.lock();
    }
    cv_.wait_for(lock, heartbeat_interval_, [&] { return stopping_; });
  }
}

void IpcEngineServer::send_event(EngineApi &engine, const RequestEvent &e) {
  const std::uint64_t id = e.id.value;
  bool overflowed = false;
  {
    std::lock_guard lock(mu_);
    overflowed = overflowed_.count(id) > 0;
    if (e.finish) {
      in_flight_.erase(id);
      overflowed_.erase(id);
    }
  }
  if (!e.finish) {
    if (overflowed) return;  // aborted for the full queue; its finish says so
    if (writer_->post(FrameType::kEvent, encode_event(e), id) != PostResult::kFull) return;
    {
      std::lock_guard lock(mu_);
      overflowed_.insert(id);
    }
    engine.abort(e.id);  // queues a command: safe from the engine thread
    return;
  }
  RequestEvent out = e;
  if (overflowed) {
    out.tokens.clear();
    out.sampled_logprobs.clear();
    out.top_logprobs.clear();
    out.finish = FinishReason::kError;
    out.error =
        "engine: the front did not take this request's tokens in time (the engine's IPC queue "
        "was full); the request was ended";
  }
  // A finish goes out after a fresh status (the engine published it with the request's
  // blocks freed), so the front never shows them in use once the client has seen the end
  // (issue 21: "920 blocks in use" after a run). Same priority, so the order holds.
  writer_->post(FrameType::kStatus, encode_status(engine.status()), 0, FramePriority::kControl);
  if (writer_->post(FrameType::kEvent, encode_event(out), id, FramePriority::kControl) ==
      PostResult::kFull)
    end_serving("the front is not reading its socket (the IPC queue is full); stopping", 1);
}

int IpcEngineServer::serve(EngineApi &engine, const ReadyInfo &info) {
  writer_ = std::make_unique<IpcWriter>(
      fd_, limits_,
      IpcWriter::Callbacks{
          [this](FrameType, std::uint64_t, bool) {
            char buf[160];
            std::snprintf(buf, sizeof buf, "the front has not read its socket for %.1f s; stopping",
                          limits_.frame_deadline.count() / 1000.0);
            end_serving(buf, 1);
          },
          [this](const std::string &) { end_serving("front closed the socket; exiting", 0); }});
  writer_->post(FrameType::kHello, encode_ready(info), 0, FramePriority::kControl);
  std::thread heartbeat([this, &engine] { heartbeat_loop(engine); });
  int rc = 0;
  try {
    while (auto frame = reader_.read()) {
      if (frame->type == FrameType::kSubmit) {
        GenerationRequest req = decode_submit(frame->payload);
        const std::uint64_t id = req.id.value;
        {
          std::lock_guard lock(mu_);
          in_flight_.insert(id);
        }
        engine.submit(std::move(req),
                      [this, &engine](const RequestEvent &e) { send_event(engine, e); });
      } else if (frame->type == FrameType::kAbort) {
        engine.abort(decode_abort(frame->payload));
      } else if (frame->type == FrameType::kStop) {
        engine.stop_request(decode_abort(frame->payload));
      } else if (frame->type == FrameType::kShutdown) {
        break;
      } else if (frame->type == FrameType::kInjectFault) {
        const FaultSpec spec = decode_fault(frame->payload);
        try {
          engine.inject_fault(spec);
          if (log_info_.load())
            std::fprintf(stderr, "keel engine: fault armed: %s\n", fault_kind_name(spec.kind));
        } catch (const Error &e) {
          std::fprintf(stderr, "keel engine: %s\n", e.what());
        }
        std::string faults = encode_faults(engine.armed_faults());
        {
          std::lock_guard lock(mu_);
          last_faults_ = faults;
        }
        writer_->post(FrameType::kArmedFaults, faults, 0, FramePriority::kControl);
      } else if (frame->type == FrameType::kClearCache) {
        try {
          engine.clear_cache();
        } catch (const Error &e) {
          std::fprintf(stderr, "keel engine: %s\n", e.what());
        }
      } else {
        throw Error(ErrorCode::kFormat, "ipc: unexpected frame type from the front");
      }
    }
  } catch (const Error &e) {
    std::fprintf(stderr, "keel engine: %s\n", e.what());
    rc = 1;
  }
  // Orderly end: abort what is left and give the engine a bounded time to finish them
  // (their finishes go out while the front still reads).
  std::vector<std::uint64_t> left;
  {
    std::lock_guard lock(mu_);
    left.assign(in_flight_.begin(), in_flight_.end());
  }
  for (auto id : left) engine.abort(RequestId(id));
  const auto until = std::chrono::steady_clock::now() + kEndGrace;
  {
    std::unique_lock lock(mu_);
    while (!in_flight_.empty() && std::chrono::steady_clock::now() < until) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      lock.lock();
    }
    stopping_ = true;
    rc = std::max(rc, end_rc_);
  }
  cv_.notify_all();
  heartbeat.join();  // bounded: it waits only on cv_, which stopping_ ends
  writer_->flush(std::chrono::steady_clock::now() + kEndGrace);
  writer_->close();  // bounded: one poll slice
  return rc;
}

}  // namespace keel::ipc
