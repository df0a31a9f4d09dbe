// An instantiated CUDA graph (RAII) and its capture from work enqueued on one stream.
// Decode steps replay a captured graph instead of ~300 separate launches; the graph's
// kernels read their per-step metadata from fixed device buffers that plain async copies
// refresh before each replay.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <utility>

#include "exec/cuda/stream_ref.h"

namespace keel::cuda {

class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec();
  GraphExec(GraphExec &&o) noexcept : g_(std::exchange(o.g_, nullptr)) {}
  GraphExec &operator=(GraphExec &&o) noexcept;
  GraphExec(const GraphExec &) = delete;
  GraphExec &operator=(const GraphExec &) = delete;

  // Captures what `enqueue` launches on `stream` (thread-local capture mode: other
  // threads, e.g. another engine, are not affected) and instantiates it. If `enqueue`
  // throws, the capture is ended and discarded before the exception propagates.
  static GraphExec capture(StreamRef stream, const std::function<void()> &enqueue);
  void launch(StreamRef stream) const;
  explicit operator bool() const { return g_ != nullptr; }

 private:
  cudaGraphExec_t g_ = nullptr;
};

}  // namespace keel::cuda
