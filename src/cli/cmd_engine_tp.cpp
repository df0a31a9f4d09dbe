// `keel engine-tp-worker` (internal): one worker rank of a tensor-parallel group,
// started by its rank 0 (`keel engine --tensor-parallel N`) with its socket on --fd.
#include <CLI/CLI.hpp>

#include "engine/tp/worker.h"

namespace keel::cli {

int cmd_engine_tp_worker(int argc, char **argv) {
  CLI::App app{"keel engine-tp-worker: one tensor-parallel worker rank (started by keel engine)"};
  int fd = 3;
  app.add_option("--fd", fd, "connected socket to rank 0");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    return app.exit(e);
  }
  return tp::run_tp_worker(fd);
}

}  // namespace keel::cli
