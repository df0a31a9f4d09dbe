// Framed messages over a Unix stream socket between the front and an engine child.
// A frame is [u32 little-endian payload length][u8 type][payload]; payloads are JSON
// (see ipc_messages.h). Reads are bounded: a frame over kMaxFrameBytes, a short read
// or a peer that closed is an error, never an absurd allocation or a hang.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace keel::ipc {

enum class FrameType : std::uint8_t {
  kHello = 1,    // child -> front: model loaded, its facts (ReadyInfo)
  kLoadError,    // child -> front: the model could not be loaded
  kSubmit,       // front -> child: a GenerationRequest
  kAbort,        // front -> child: a request id
  kEvent,        // child -> front: RequestEvent(s) of one step
  kStatus,       // child -> front: EngineStatus, sent as a heartbeat
  kShutdown,     // front -> child: stop admission, abort, exit
  kInjectFault,  // front -> child: arm a FaultSpec (count 0 disarms its kind)
  kClearCache,   // front -> child: forget every cached prefix block
  kArmedFaults,  // child -> front: the faults armed now (after a change and with heartbeats)
};
constexpr FrameType kLastFrameType = FrameType::kArmedFaults;

constexpr std::uint32_t kMaxFrameBytes = 256u << 20;

struct Frame {
  FrameType type{};
  std::string payload;
};

// Writes whole frames; safe to call from several threads (one mutex per socket).
class FrameWriter {
 public:
  explicit FrameWriter(int fd) : fd_(fd) {}
  // Returns false when the peer is gone (EPIPE, reset); never raises SIGPIPE.
  bool write(FrameType type, const std::string &payload);

 private:
  int fd_;
  std::mutex mu_;
};

// Reads whole frames from a blocking socket. One reader thread per socket.
class FrameReader {
 public:
  explicit FrameReader(int fd) : fd_(fd) {}
  // nullopt on orderly EOF; throws Error(kFormat) on a malformed frame and
  // Error(kUnavailable) on a socket error.
  std::optional<Frame> read();

 private:
  int fd_;
};

}  // namespace keel::ipc
