#include "server/connection_limits.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace keel::server {

OpenFilesLimit raise_open_files_limit() {
  OpenFilesLimit out;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
    out.error = std::strerror(errno);
    return out;
  }
  out.before = out.now = lim.rlim_cur;
  rlim_t target = lim.rlim_max;
  if (target == RLIM_INFINITY) {
    // NOFILE cannot be set past fs.nr_open.
    std::uint64_t nr_open = 1 << 20;
    std::ifstream("/proc/sys/fs/nr_open") >> nr_open;
    target = static_cast<rlim_t>(nr_open);
  }
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur >= target) return out;
  rlimit raised = lim;
  raised.rlim_cur = target;
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) {
    out.error = std::strerror(errno);
    return out;
  }
  out.now = target;
  return out;
}

std::size_t connections_for_open_files(std::uint64_t open_files) {
  const std::uint64_t reserve = std::min<std::uint64_t>(256, open_files / 8);
  return static_cast<std::size_t>(std::max<std::uint64_t>(16, open_files - reserve));
}

}  // namespace keel::server
