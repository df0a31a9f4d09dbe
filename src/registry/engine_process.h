// One `keel engine` child process and the IPC client that talks to it. The child is
// tied to the front: it gets SIGKILL when the thread that spawned it exits
// (PR_SET_PDEATHSIG; spawn only from long-lived threads) and it exits on its own when
// its socket to the front closes, so a SIGKILL of the server leaves no orphan.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/ipc/client.h"

namespace keel {

struct EngineLaunch {
  std::filesystem::path executable;  // the keel binary (usually /proc/self/exe)
  std::filesystem::path model_path;
  std::vector<std::string> extra_args;  // --device, --threads, ... passed to `keel engine`
  ipc::IpcClientOptions ipc;            // the model id (for errors) and the queue's bounds
};

class EngineProcess {
 public:
  // Forks and execs `keel engine --fd 3 --model PATH ...`. Throws Error(kUnavailable).
  static std::unique_ptr<EngineProcess> spawn(const EngineLaunch &launch);
  ~EngineProcess();  // kills the child if it is still running

  ipc::IpcEngineClient &client() { return *client_; }
  pid_t pid() const { return pid_; }
  // Non-blocking: has the child exited? Fills a description ("exited with 1", "killed by signal
  // 9").
  bool exited(std::string *how = nullptr);
  // SIGKILL and reap (bounded wait); the requests in flight get `reason` as their error.
  void kill(const std::string &reason);
  // Orderly stop: ask the child to abort and exit, wait up to `grace`, then kill.
  void shutdown(std::chrono::milliseconds grace);

 private:
  EngineProcess(pid_t pid, int fd, ipc::IpcClientOptions ipc);
  bool reap(std::chrono::milliseconds wait);

  pid_t pid_;
  bool reaped_ = false;
  std::string exit_how_;
  std::unique_ptr<ipc::IpcEngineClient> client_;
};

}  // namespace keel
