#include "core/thread_owner.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace keel {

void ThreadOwner::fail(const char *what) const {
  std::ostringstream os;
  os << "keel: fatal: " << what << " called from thread " << std::this_thread::get_id()
     << ", but its context is owned by thread " << id_
     << " (only the engine thread may enqueue work on it)\n";
  const std::string msg = os.str();
  std::fputs(msg.c_str(), stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace keel
