#include "engine/tp/group.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

extern char **environ;

namespace keel::tp {

namespace {

constexpr std::uint32_t kPreambleMagic = 0x5750544b;  // "KTPW"

std::string describe_status(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "killed by signal " + std::to_string(WTERMSIG(st));
  return "ended";
}

}  // namespace

TpLaunch default_tp_launch() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return TpLaunch{
      ec ? std::filesystem::path("/proc/self/exe") : self, {"engine-tp-worker", "--fd", "3"}, {}};
}

TpGroup::TpGroup(TpGroupOptions options, WorkerConfig base) : options_(std::move(options)) {
  const int n = options_.size;
  if (n < 1 || n > 64)
    throw Error(ErrorCode::kInvalidArgument,
                "--tensor-parallel " + std::to_string(n) + ": between 1 and 64 ranks");
  reaped_.assign(static_cast<std::size_t>(std::max(n - 1, 0)), false);
  std::vector<int> fds;
  auto cleanup = [&] {
    for (int fd : fds) ::close(fd);
    for (pid_t p : pids_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
    pids_.clear();
  };
  // Prepared before any fork: after it, the child makes only async-signal-safe calls.
  std::vector<std::string> args = {options_.launch.executable.string()};
  args.insert(args.end(), options_.launch.args.begin(), options_.launch.args.end());
  std::vector<char *> argv;
  for (auto &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_store(options_.launch.env);
  std::vector<char *> envp;
  for (char **e = environ; e && *e; ++e) envp.push_back(*e);
  for (auto &e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  for (int r = 1; r < n; ++r) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      cleanup();
      throw Error(ErrorCode::kUnavailable, std::string("tp: socketpair: ") + std::strerror(errno));
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(sv[0]);
      ::close(sv[1]);
      cleanup();
      throw Error(ErrorCode::kUnavailable, std::string("tp: fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // rank 0 died before prctl took effect
      if (::dup2(sv[1], 3) < 0) ::_exit(127);   // dup2 clears CLOEXEC on fd 3
      ::close_range(4, ~0U, 0);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(sv[1]);
    pids_.push_back(pid);
    fds.push_back(sv[0]);
    // The worker learns its rank before anything else; a fresh socket's buffer holds it.
    const std::uint32_t preamble[3] = {kPreambleMagic, static_cast<std::uint32_t>(r),
                                       static_cast<std::uint32_t>(n)};
    if (::send(sv[0], preamble, sizeof preamble, MSG_NOSIGNAL) != sizeof preamble) {
      cleanup();
      throw Error(ErrorCode::kUnavailable, "tp: cannot reach worker rank " + std::to_string(r));
    }
  }
  parallel::SocketCommunicatorOptions copts;
  copts.op_timeout = options_.op_timeout;
  comm_ = std::make_unique<parallel::SocketCommunicator>(0, n, fds, copts);
  fds.clear();  // owned by the communicator now
  std::vector<std::string> configs(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    WorkerConfig c = base;
    c.rank = r;
    c.size = n;
    c.op_timeout_ms = options_.op_timeout.count();
    configs[r] = encode_config(c);
  }
  try {
    comm_->scatter(std::move(configs));
  } catch (...) {
    comm_.reset();
    cleanup();
    throw;
  }
}

TpGroup::~TpGroup() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (monitor_.joinable()) monitor_.join();
  if (comm_ && !comm_->broken()) {
    try {
      std::string bye = encode_blocks(Command::kShutdown, 0);
      comm_->broadcast_message(
          bye, parallel::SocketCommunicator::Clock::now() + std::chrono::seconds(1));
    } catch (const std::exception &) {
    }
  }
  comm_.reset();  // closes the sockets: a worker still reading sees EOF
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (std::size_t i = 0; i < pids_.size(); ++i) {
    if (reaped_[i]) continue;
    for (;;) {
      const pid_t r = ::waitpid(pids_[i], nullptr, WNOHANG);
      if (r == pids_[i] || (r < 0 && errno != EINTR)) break;
      if (std::chrono::steady_clock::now() >= until) {
        ::kill(pids_[i], SIGKILL);
        ::waitpid(pids_[i], nullptr, 0);  // SIGKILL of a plain CPU process: prompt
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

void TpGroup::wait_ready() {
  comm_->set_op_timeout(options_.load_timeout);
  std::vector<std::string> replies;
  try {
    replies = guarded([&] { return comm_->gather("ok"); });
  } catch (...) {
    comm_->set_op_timeout(options_.op_timeout);
    throw;
  }
  comm_->set_op_timeout(options_.op_timeout);
  for (std::size_t r = 1; r < replies.size(); ++r)
    if (replies[r] != "ok")
      throw Error(ErrorCode::kUnavailable,
                  "tp rank " + std::to_string(r) + " could not load its shard: " + replies[r]);
  // Watched from here on: a worker that fails to load reports its error above instead.
  if (!monitor_.joinable()) monitor_ = std::thread([this] { monitor_loop(); });
}

std::function<void(const std::string &)> exit_on_group_lost(std::chrono::milliseconds grace) {
  return [grace](const std::string &why) {
    std::fprintf(stderr, "keel engine: tensor-parallel group lost (%s); exiting\n", why.c_str());
    std::fflush(stderr);
    // The engine thread may be failing this step's requests right now: give their
    // error events a moment to reach the front, then end the process whatever happens.
    std::thread([grace] {
      std::this_thread::sleep_for(grace);
      std::_Exit(3);
    }).detach();
  };
}

void TpGroup::check_alive() const {
  std::lock_guard lock(mu_);
  if (!lost_why_.empty())
    throw Error(ErrorCode::kUnavailable, "tensor-parallel group lost: " + lost_why_);
}

bool TpGroup::lost() const {
  std::lock_guard lock(mu_);
  return !lost_why_.empty();
}

std::string TpGroup::lost_reason() const {
  std::lock_guard lock(mu_);
  return lost_why_;
}

void TpGroup::mark_lost(const std::string &why) {
  {
    std::lock_guard lock(mu_);
    if (!lost_why_.empty()) return;
    lost_why_ = why.empty() ? "unknown" : why;
  }
  if (options_.on_lost) options_.on_lost(why);
}

std::vector<pid_t> TpGroup::worker_pids() const { return pids_; }

void TpGroup::monitor_loop() {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, options_.monitor_interval);
    if (stopping_) break;
    std::string why;
    for (std::size_t i = 0; i < pids_.size(); ++i) {
      if (reaped_[i]) continue;
      int st = 0;
      if (::waitpid(pids_[i], &st, WNOHANG) == pids_[i]) {
        reaped_[i] = true;
        if (why.empty())
          why = "tp rank " + std::to_string(i + 1) + " (pid " + std::to_string(pids_[i]) + ") " +
                describe_status(st);
      }
    }
    if (!why.empty()) {
      lock.unlock();
      mark_lost(why);
      lock.lock();
    }
  }
}

}  // namespace keel::tp
