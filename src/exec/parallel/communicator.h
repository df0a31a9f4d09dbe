// A group of ranks that compute one model together (tensor parallelism). The data
// plane of a step: all-reduce of activations, broadcast, barrier.
//
// Never hang (docs/ARCHITECTURE.md, "every wait is bounded"): every blocking operation ends by
// its deadline. A peer that died or missed the deadline is Error(kUnavailable) naming
// the rank and the operation; after any failure the communicator is broken (the ranks'
// message streams no longer line up) and every later call fails at once.
//
// Buffers live in the implementation's memory space: host memory for the socket
// communicator, device memory (on the communicator's stream) for NCCL.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace keel::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In place: every rank ends with the element-wise sum over ranks of `data`, the same
  // bits on every rank. dtype: kF32 or kBF16.
  virtual void all_reduce_sum(void *data, std::size_t count, DType dtype) = 0;
  // root's `bytes` bytes at `data` reach every rank's `data`.
  virtual void broadcast(void *data, std::size_t bytes, int root) = 0;
  // Returns when every rank has entered it.
  virtual void barrier() = 0;
  // True after an operation failed; the group must be torn down.
  virtual bool broken() const = 0;
};

}  // namespace keel::parallel
