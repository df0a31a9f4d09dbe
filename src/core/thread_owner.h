// The thread that owns an execution context (docs/ARCHITECTURE.md, rule 1: only the
// engine thread enqueues work on its device). Made on that thread and never handed to
// another: there is no way to rebind it. check() is one thread-id compare, run in every
// build; a call from any other thread is a bug in keel, not a runtime condition, so it
// ends the process with a message naming the call, before any work is enqueued.
#pragma once

#include <thread>

namespace keel {

class ThreadOwner {
 public:
  ThreadOwner() : id_(std::this_thread::get_id()) {}

  std::thread::id id() const { return id_; }
  bool is_current() const { return std::this_thread::get_id() == id_; }
  // `what` names the caller (a launcher, an entry point) in the fatal message.
  void check(const char *what) const {
    if (__builtin_expect(!is_current(), 0)) fail(what);
  }

 private:
  [[noreturn]] void fail(const char *what) const;

  std::thread::id id_;
};

}  // namespace keel
