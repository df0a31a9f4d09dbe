// Framed messages over a Unix stream socket between the front and an engine child.
// A frame is [u32 little-endian payload length][u8 type][payload]; payloads are JSON
// (see ipc_messages.h). Reads are bounded: a frame over kMaxFrameBytes, a short read
// or a peer that closed is an error, never an absurd allocation or a hang. Sockets may
// be non-blocking (ipc_writer.h makes them so): both ends here wait in poll() instead.
#pragma once

#include <chrono>
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
  kStop,         // front -> child: a request id whose stop string the front matched
  kProgress,     // child -> front: LoadProgress while the model loads (before hello)
};
constexpr FrameType kLastFrameType = FrameType::kProgress;

constexpr std::uint32_t kMaxFrameBytes = 256u << 20;

struct Frame {
  FrameType type{};
  std::string payload;
};

// Header and payload in one buffer, as they go on the wire.
std::string encode_frame(FrameType type, const std::string &payload);

// Writes whole frames, waiting for the socket at most `timeout` per frame; safe to call
// from several threads (one mutex per socket). For a child's first and last words
// (hello, load error) and for tests; the front and the serving engine use IpcWriter.
class FrameWriter {
 public:
  explicit FrameWriter(int fd, std::chrono::milliseconds timeout = std::chrono::seconds(10))
      : fd_(fd), timeout_(timeout) {}
  // Returns false when the peer is gone (EPIPE, reset) or did not read in time; never
  // raises SIGPIPE.
  bool write(FrameType type, const std::string &payload);

 private:
  int fd_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
};

// Reads whole frames. One reader thread per socket; on a non-blocking socket it waits
// in poll() (shutdown() of the socket wakes it).
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
