// RAII owners of CUDA objects (streams, events, device and pinned host memory) and the
// bounded host-side wait on an event. Nothing here is global: every object belongs to
// whoever holds it, so two engines in one process never share a stream or a buffer.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <utility>

#include "exec/cuda/stream_ref.h"

namespace keel::cuda {

// A non-blocking stream (never synchronises implicitly with the legacy default stream).
class Stream {
 public:
  Stream();  // on the current device
  ~Stream();
  Stream(Stream &&o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream &operator=(Stream &&o) noexcept;
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event &&o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event &operator=(Event &&o) noexcept;
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;
  cudaEvent_t get() const { return e_; }

  void record(StreamRef stream);
  // Makes `stream` wait (on the device) for the work captured by the last record().
  void make_wait(StreamRef stream) const;
  bool done() const;  // cudaEventQuery: true once the recorded work finished
  // Polls until done or `timeout` passes; past the deadline throws Error(kTimeout) naming
  // `what`. Never holds a lock, never calls cudaEventSynchronize (which cannot time out).
  void wait(std::chrono::milliseconds timeout, const char *what) const;
  // Milliseconds between two recorded timing events (both must be done).
  static float elapsed_ms(const Event &start, const Event &end);

 private:
  cudaEvent_t e_ = nullptr;
};

// Untyped device memory; as<T>() gives a typed pointer. Allocation happens only at setup:
// cudaFree synchronises the whole device, so nothing frees memory on the hot path.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  template <typename T>
  T *as() const {
    return static_cast<T *>(p_);
  }
  void *data() const { return p_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void *p_ = nullptr;
  std::size_t bytes_ = 0;
};

// Page-locked host memory, so that async copies are truly asynchronous. `mapped` also
// maps it into the device address space (device_ptr()).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes, bool mapped = false);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer &&o) noexcept
      : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedBuffer &operator=(PinnedBuffer &&o) noexcept;
  PinnedBuffer(const PinnedBuffer &) = delete;
  PinnedBuffer &operator=(const PinnedBuffer &) = delete;

  template <typename T>
  T *as() const {
    return static_cast<T *>(p_);
  }
  void *data() const { return p_; }
  std::size_t bytes() const { return bytes_; }
  void *device_ptr() const;  // only for mapped buffers

 private:
  void *p_ = nullptr;
  std::size_t bytes_ = 0;
};

// Number of CUDA devices usable by this process (0 when there is no driver or device;
// never throws), so tests and `--device` parsing can skip or refuse cleanly.
int device_count();

}  // namespace keel::cuda
