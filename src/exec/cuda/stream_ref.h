// A stream as launchers receive it: issued only by CudaContext, carrying the thread that
// owns the context. Every launcher and every enqueue takes one and unwraps it with
// get(name), which checks the calling thread first (one thread-id compare, every build;
// a foreign thread is fatal and the message names the launcher). No public
// constructor: there is no way to hand a launcher the legacy default stream or a
// stream of another engine's context.
#pragma once

#include <cuda_runtime.h>

#include "core/thread_owner.h"

namespace keel::cuda {

class StreamRef {
 public:
  // The raw stream, for the one launch or enqueue named by `what`.
  cudaStream_t get(const char *what) const {
    owner_.check(what);
    return stream_;
  }
  const ThreadOwner &owner() const { return owner_; }

 private:
  friend class CudaContext;
  StreamRef(cudaStream_t stream, const ThreadOwner &owner) : stream_(stream), owner_(owner) {}

  cudaStream_t stream_;
  ThreadOwner owner_;
};

}  // namespace keel::cuda
