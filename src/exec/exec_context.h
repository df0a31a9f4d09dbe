// The CPU backend's execution context: the thread that owns the engine's compute, the
// engine's own thread pool, and a workspace. One per engine; nothing here is global,
// so two engines in one process each size and own their threads.
//
// Every forward and KV operation calls check_owner() (core/thread_owner.h, every build):
// a call from any thread but the one that made the context ends the process.
#pragma once

#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "core/thread_owner.h"
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
  // threads <= 0: one per hardware thread. The constructing thread (the engine thread,
  // inside its BackendFactory) becomes the owner, for good.
  explicit ExecContext(int threads = 0);

  ThreadPool &pool() { return pool_; }
  Workspace &workspace() { return workspace_; }

  std::thread::id owner() const { return owner_.id(); }
  // Fatal, naming `what`, when called off the owner thread.
  void check_owner(const char *what) const { owner_.check(what); }

 private:
  ThreadOwner owner_;
  ThreadPool pool_;
  Workspace workspace_;
};

}  // namespace keel
