// Rank 0's side of a tensor-parallel group: it spawns ranks 1..N-1 as child
// processes, holds the control/data sockets to them, and watches them.
//
//   keel engine (rank 0: scheduler, sampler, its own shard)
//     ├─ socket ─▶ rank 1 (`keel engine-tp-worker`: its shard, nothing else)
//     ├─ socket ─▶ rank 2
//     └─ ...      every step: command (broadcast) ─▶ forward with all-reduces
//
// Liveness covers the group (docs/ARCHITECTURE.md, "a wedged engine is killed"): a worker that
// exits, dies or misses an operation's deadline makes the group lost. Then every
// later operation fails at once with Error(kUnavailable), and on_lost runs once (the
// `keel engine` process exits on it, so that the front fails its requests and
// restarts the whole group). Workers die with rank 0: PR_SET_PDEATHSIG, and the EOF
// on their socket. Construct the group on a long-lived thread (the engine thread):
// PR_SET_PDEATHSIG fires when the thread that forked exits.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/tp/messages.h"
#include "exec/parallel/socket_communicator.h"

namespace keel::tp {

// How to start a worker. The worker's socket is its fd 3.
struct TpLaunch {
  std::filesystem::path executable;
  std::vector<std::string> args;  // after argv[0]
  std::vector<std::string> env;   // NAME=VALUE added to this process's environment
};

// `keel engine-tp-worker --fd 3` of this very binary.
TpLaunch default_tp_launch();

struct TpGroupOptions {
  int size = 2;
  TpLaunch launch = default_tp_launch();
  std::chrono::milliseconds op_timeout{60000};     // one collective or command
  std::chrono::milliseconds load_timeout{600000};  // workers loading their shards
  std::chrono::milliseconds monitor_interval{50};
  // Runs once when the group is lost, on whichever thread noticed (the engine thread
  // inside a step, or the monitor thread); must not block for long.
  std::function<void(const std::string &why)> on_lost;
};

// The on_lost of a `keel engine` process: logs, and ends the process with status 3
// after `grace` (so the front sees the engine exit, fails its requests, restarts it).
std::function<void(const std::string &why)> exit_on_group_lost(
    std::chrono::milliseconds grace = std::chrono::milliseconds(300));

class TpGroup {
 public:
  // Spawns the workers and sends each its configuration (`base` with its rank and
  // size filled in). Throws Error(kUnavailable) when a worker cannot be started.
  // Liveness watching starts once wait_ready() succeeds.
  TpGroup(TpGroupOptions options, WorkerConfig base);
  // Asks workers to exit, waits briefly, then kills and reaps them.
  ~TpGroup();
  TpGroup(const TpGroup &) = delete;
  TpGroup &operator=(const TpGroup &) = delete;

  int size() const { return options_.size; }
  parallel::SocketCommunicator &comm() { return *comm_; }
  // Waits (load_timeout) until every worker has loaded its shard; throws its error.
  void wait_ready();

  // Runs `op` (communication with the workers); turns a broken communicator into a
  // lost group. Throws Error(kUnavailable) at once when the group is already lost.
  template <typename F>
  auto guarded(F &&op) -> decltype(op()) {
    check_alive();
    try {
      return op();
    } catch (...) {
      if (comm_->broken()) mark_lost(comm_->broken_reason());
      throw;
    }
  }
  void check_alive() const;
  // The deadline of an operation starting now.
  parallel::SocketCommunicator::Clock::time_point deadline() const {
    return parallel::SocketCommunicator::Clock::now() + options_.op_timeout;
  }

  bool lost() const;
  std::string lost_reason() const;
  // Idempotent; runs on_lost the first time.
  void mark_lost(const std::string &why);
  std::vector<pid_t> worker_pids() const;

 private:
  void monitor_loop();

  TpGroupOptions options_;
  std::vector<pid_t> pids_;  // [size - 1], rank r at r - 1
  std::unique_ptr<parallel::SocketCommunicator> comm_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;     // under mu_
  std::string lost_why_;      // under mu_
  std::vector<bool> reaped_;  // under mu_
  std::thread monitor_;       // last: started when the rest exists
};

}  // namespace keel::tp
