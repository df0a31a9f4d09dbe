// `keel bench --self`: a `keel serve --port 0` child of this binary on one model, its
// log in a file; the URL comes from its "listening on" line. Stopped (SIGTERM, then
// SIGKILL after a grace) when the object goes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace keel::cli {

class SelfServer {
 public:
  // Throws keel::Error when the server exits or does not listen within startup_timeout.
  SelfServer(const std::filesystem::path &model, const std::string &device,
             const std::vector<std::string> &extra_args, const std::filesystem::path &log_path,
             std::chrono::seconds startup_timeout);
  ~SelfServer();
  SelfServer(const SelfServer &) = delete;
  SelfServer &operator=(const SelfServer &) = delete;

  const std::string &url() const { return url_; }

 private:
  void stop();

  pid_t pid_ = -1;
  std::string url_;
};

}  // namespace keel::cli
