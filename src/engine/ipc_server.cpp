#include "engine/ipc_server.h"

#include <unistd.h>

#include <cstdio>
#include <thread>

#include "core/error.h"

namespace keel::ipc {

IpcEngineServer::IpcEngineServer(int fd, std::chrono::milliseconds heartbeat_interval)
    : fd_(fd), heartbeat_interval_(heartbeat_interval), writer_(fd), reader_(fd) {}

IpcEngineServer::~IpcEngineServer() = default;

void IpcEngineServer::send_load_error(const std::string &message) {
  writer_.write(FrameType::kLoadError, message);
}

void IpcEngineServer::enqueue(FrameType type, std::string payload) {
  {
    std::lock_guard lock(mu_);
    queue_.emplace_back(type, std::move(payload));
  }
  cv_.notify_all();
}

void IpcEngineServer::writer_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty() && stopping_) return;
    auto batch = std::move(queue_);
    queue_.clear();
    lock.unlock();
    for (auto &[type, payload] : batch) {
      if (!writer_.write(type, payload)) {
        // The front is gone: nothing to serve. Exit now rather than compute for no one.
        if (log_info_.load())
          std::fprintf(stderr, "keel engine: front closed the socket; exiting\n");
        std::_Exit(0);
      }
    }
    lock.lock();
  }
}

void IpcEngineServer::heartbeat_loop(EngineApi &engine) {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    std::string payload = encode_status(engine.status());
    std::string faults = encode_faults(engine.armed_faults());
    lock.lock();
    queue_.emplace_back(FrameType::kStatus, std::move(payload));
    // Faults are taken by the engine as they strike: report the list when it changed.
    if (faults != last_faults_) {
      last_faults_ = faults;
      queue_.emplace_back(FrameType::kArmedFaults, std::move(faults));
    }
    cv_.notify_all();
    cv_.wait_for(lock, heartbeat_interval_, [&] { return stopping_; });
  }
}

int IpcEngineServer::serve(EngineApi &engine, const ReadyInfo &info) {
  enqueue(FrameType::kHello, encode_ready(info));
  std::thread writer([this] { writer_loop(); });
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
        engine.submit(std::move(req), [this, &engine](const RequestEvent &e) {
          std::string payload = encode_event(e);
          // A finish goes out after a fresh status (the engine published it with the
          // request's blocks freed), so the front never shows them in use once the
          // client has seen the end (issue 21: "920 blocks in use" after a run).
          std::string status = e.finish ? encode_status(engine.status()) : std::string();
          std::lock_guard lock(mu_);
          if (e.finish) {
            in_flight_.erase(e.id.value);
            queue_.emplace_back(FrameType::kStatus, std::move(status));
          }
          queue_.emplace_back(FrameType::kEvent, std::move(payload));
          cv_.notify_all();
        });
      } else if (frame->type == FrameType::kAbort) {
        engine.abort(decode_abort(frame->payload));
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
        std::lock_guard lock(mu_);
        last_faults_ = faults;
        queue_.emplace_back(FrameType::kArmedFaults, std::move(faults));
        cv_.notify_all();
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
  // Orderly end: abort what is left and give the engine a bounded time to finish them.
  std::vector<std::uint64_t> left;
  {
    std::lock_guard lock(mu_);
    left.assign(in_flight_.begin(), in_flight_.end());
  }
  for (auto id : left) engine.abort(RequestId(id));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  {
    std::unique_lock lock(mu_);
    while (!in_flight_.empty() && std::chrono::steady_clock::now() < until) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      lock.lock();
    }
    stopping_ = true;
  }
  cv_.notify_all();
  heartbeat.join();
  writer.join();
  return rc;
}

}  // namespace keel::ipc
