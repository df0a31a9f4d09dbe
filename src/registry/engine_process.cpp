#include "registry/engine_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace keel {

EngineProcess::EngineProcess(pid_t pid, int fd, ipc::IpcClientOptions ipc)
    : pid_(pid), client_(std::make_unique<ipc::IpcEngineClient>(fd, std::move(ipc))) {}

EngineProcess::~EngineProcess() {
  if (!reaped_) kill("engine process stopped");
}

std::unique_ptr<EngineProcess> EngineProcess::spawn(const EngineLaunch &launch) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error(ErrorCode::kUnavailable,
                std::string("engine: socketpair: ") + std::strerror(errno));
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> args = {launch.executable.string(), "engine", "--fd", "3", "--model",
                                   launch.model_path.string()};
  args.insert(args.end(), launch.extra_args.begin(), launch.extra_args.end());
  std::vector<char *> argv;
  for (auto &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(sv[0]);
    ::close(sv[1]);
    throw Error(ErrorCode::kUnavailable, std::string("engine: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the front died before prctl took effect
    if (::dup2(sv[1], 3) < 0) ::_exit(127);
    ::close_range(4, ~0U, 0);  // no inherited listening sockets or other engines' sockets
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(sv[1]);
  return std::unique_ptr<EngineProcess>(new EngineProcess(pid, sv[0], launch.ipc));
}

bool EngineProcess::reap(std::chrono::milliseconds wait) {
  if (reaped_) return true;
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      if (WIFEXITED(st))
        exit_how_ = "exited with status " + std::to_string(WEXITSTATUS(st));
      else if (WIFSIGNALED(st))
        exit_how_ = std::string("killed by signal ") + std::to_string(WTERMSIG(st));
      else
        exit_how_ = "ended";
      return true;
    }
    if (r < 0 && errno != EINTR) {
      reaped_ = true;
      exit_how_ = "gone";
      return true;
    }
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

bool EngineProcess::exited(std::string *how) {
  bool done = reap(std::chrono::milliseconds(0));
  if (done && how) *how = exit_how_;
  return done;
}

void EngineProcess::kill(const std::string &reason) {
  // Fail the requests first: callers must not wait on the kill.
  client_->fail_all(reason);
  if (!reaped_) {
    ::kill(pid_, SIGKILL);
    // A process in uninterruptible sleep (a driver call) may take a moment; don't hang on it.
    if (!reap(std::chrono::seconds(10))) exit_how_ = "killed (not yet reaped)";
  }
}

void EngineProcess::shutdown(std::chrono::milliseconds grace) {
  client_->request_shutdown();
  if (!reap(grace)) kill("engine did not stop within the grace period");
  client_->fail_all("model unloaded");
}

}  // namespace keel
