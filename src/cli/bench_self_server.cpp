#include "cli/bench_self_server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace keel::cli {

namespace {

std::string read_text(const std::filesystem::path &p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string tail(const std::string &s, std::size_t n) {
  return s.size() <= n ? s : s.substr(s.size() - n);
}

}  // namespace

SelfServer::SelfServer(const std::filesystem::path &model, const std::string &device,
                       const std::vector<std::string> &extra_args,
                       const std::filesystem::path &log_path,
                       std::chrono::seconds startup_timeout) {
  std::vector<std::string> args = {"keel",   "serve",     model.string(), "--port", "0",
                                   "--host", "127.0.0.1", "--device",     device};
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  std::vector<char *> argv;
  for (auto &a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0)
    throw Error(ErrorCode::kInvalidArgument,
                "cannot write " + log_path.string() + ": " + std::strerror(errno));
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    // The server must not outlive a bench that is killed.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  if (pid_ < 0) throw Error(ErrorCode::kInternal, std::string("fork: ") + std::strerror(errno));

  const auto until = std::chrono::steady_clock::now() + startup_timeout;
  constexpr std::string_view kMarker = "listening on ";
  while (true) {
    const std::string log = read_text(log_path);
    if (auto at = log.find(kMarker); at != std::string::npos) {
      const std::size_t start = at + kMarker.size();
      const std::size_t end = log.find_first_of(" \n", start);
      if (end != std::string::npos) {
        url_ = log.substr(start, end - start);
        return;
      }
    }
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw Error(ErrorCode::kUnavailable,
                  "keel serve " + model.string() + " exited before listening:\n" + tail(log, 2000));
    }
    if (std::chrono::steady_clock::now() > until) {
      stop();
      throw Error(ErrorCode::kTimeout, "keel serve " + model.string() + " did not listen within " +
                                           std::to_string(startup_timeout.count()) + "s:\n" +
                                           tail(log, 2000));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

SelfServer::~SelfServer() { stop(); }

void SelfServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  int status = 0;
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_ = -1;
}

}  // namespace keel::cli
