// The worker ranks of this test binary's tensor-parallel groups: TpGroup re-executes
// the binary with this (otherwise disabled) test selected, and it becomes
// `keel engine-tp-worker` on fd 3. Real processes, without the keel binary.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "engine/tp/worker.h"
#include "tp_test_launch.h"

namespace keel {
namespace {

TEST(TpWorkerEntry, DISABLED_Run) {
  if (!std::getenv(test::kTpWorkerEnv)) GTEST_SKIP() << "only as a worker rank";
  std::fflush(stdout);
  std::_Exit(tp::run_tp_worker(3));
}

}  // namespace
}  // namespace keel
