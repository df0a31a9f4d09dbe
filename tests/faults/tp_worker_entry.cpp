// Worker ranks (and a stand-alone rank 0) of this test binary's tensor-parallel
// groups: TpGroup re-executes the binary with one of these (disabled) tests selected.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "engine/tp/runner.h"
#include "engine/tp/worker.h"
#include "support/paths.h"
#include "unit/tp/tp_test_launch.h"

namespace keel {
namespace {

TEST(TpWorkerEntry, DISABLED_Run) {
  if (!std::getenv(test::kTpWorkerEnv)) GTEST_SKIP() << "only as a worker rank";
  std::fflush(stdout);
  std::_Exit(tp::run_tp_worker(3));
}

// Rank 0 of a TP=3 group, as its own process: writes its workers' pids to the file
// named by KEEL_TP_TEST_PIDFILE, then waits to be killed.
TEST(TpRank0Entry, DISABLED_Run) {
  const char *pidfile = std::getenv("KEEL_TP_TEST_PIDFILE");
  if (!pidfile) GTEST_SKIP() << "only as a stand-alone rank 0";
  ExecContext ctx(1);
  tp::TpRunnerOptions o;
  o.model = test::fixtures_dir() / "models" / "llama_linear_mha_f32";
  o.size = 4;
  o.threads_per_rank = 1;
  o.kv = {16, 16};
  o.launch = test::tp_test_launch();
  tp::TpCpuRunner runner(o, ctx);
  {
    std::ofstream f(std::string(pidfile) + ".tmp");
    for (pid_t p : runner.group().worker_pids()) f << p << "\n";
  }
  std::rename((std::string(pidfile) + ".tmp").c_str(), pidfile);
  for (;;) ::pause();
}

}  // namespace
}  // namespace keel
