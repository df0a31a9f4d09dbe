// The CPU backend's execution context: the thread that owns the engine's compute, the
// engine's own thread pool, and a workspace. One per engine; nothing here is global,
// so two engines in one process each size and own their threads.
//
// In builds with KEEL_CHECK_THREAD_OWNERSHIP (Debug), every forward and KV operation
// calls check_owner(), which throws if it runs on any thread but the owner.
#pragma once

#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace keel {

// A bump allocator in chunks that never move, reset after each forward pass; the
// largest chunk is kept, so steady state allocates nothing.
class Workspace {
 public:
  // Returns n floats (64-byte aligned), valid until reset().
  float *floats(std::size_t n);
  void reset();
  std::size_t capacity_bytes() const;

 private:
  struct Chunk {
    std::unique_ptr<std::byte[]> mem;
    std::size_t size = 0, used = 0;
  };
  std::vector<Chunk> chunks_;
};

class ExecContext {
 public:
  // threads <= 0: one per hardware thread. The constructing thread becomes the owner.
  explicit ExecContext(int threads = 0);

  ThreadPool &pool() { return pool_; }
  Workspace &workspace() { return workspace_; }

  // Hands ownership to the calling thread (an engine thread that takes over a context
  // built elsewhere, before its first forward).
  void bind_to_current_thread() { owner_ = std::this_thread::get_id(); }
  std::thread::id owner() const { return owner_; }
  // Throws Error(kInternal) naming `what` when called off the owner thread; a no-op
  // unless KEEL_CHECK_THREAD_OWNERSHIP is defined.
  void check_owner(const char *what) const;

 private:
  std::thread::id owner_;
  ThreadPool pool_;
  Workspace workspace_;
};

}  // namespace keel
